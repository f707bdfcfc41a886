package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// roundTripsMetric counts the gateway's decisions that asked Redis.
const roundTripsMetric = "gateway_redis_round_trips_total"

// overloadedMetric counts the decisions the gateway answered 429 because
// Redis did not answer them in time while it answered others (a round trip
// past redis.timeout on a loaded machine, or no free slot within
// redis.queue_timeout): what explains non-2xx where every request passes.
const overloadedMetric = "gateway_redis_overloaded_total"

// counters are read before and after a run of a Redis target; the run's
// share is the difference.
type counters struct {
	// RoundTrips is the gateway's roundTripsMetric.
	RoundTrips float64
	// Calls are Redis's INFO commandstats calls by command, INFO itself
	// left out. Commands a script runs (TIME, GET, SET inside EVALSHA) are
	// counted too, each under its own name.
	Calls map[string]int64
	// ScriptUsec is the time Redis spent in EVALSHA and EVAL (the
	// scripts' own commands included), summed over its servers.
	ScriptUsec int64
	// Overloaded is the gateway's overloadedMetric.
	Overloaded float64
}

// sub is c - o.
func (c counters) sub(o counters) counters {
	d := counters{RoundTrips: c.RoundTrips - o.RoundTrips, Calls: map[string]int64{},
		ScriptUsec: c.ScriptUsec - o.ScriptUsec, Overloaded: c.Overloaded - o.Overloaded}
	for name, n := range c.Calls {
		if n -= o.Calls[name]; n != 0 {
			d.Calls[name] = n
		}
	}
	return d
}

// commands is the total of Calls.
func (c counters) commands() int64 {
	var n int64
	for _, v := range c.Calls {
		n += v
	}
	return n
}

// readCounters reads the gateway's metric and the commandstats of every
// Redis (each master of a Cluster), summed.
func readCounters(ctx context.Context, metricsURL string, redisAddrs []string) (counters, error) {
	ms, err := scrapeMetrics(ctx, metricsURL, roundTripsMetric, overloadedMetric)
	if err != nil {
		return counters{}, err
	}
	c := counters{RoundTrips: ms[0], Overloaded: ms[1], Calls: map[string]int64{}}
	for _, a := range redisAddrs {
		info, err := redistest.Do(a, "INFO", "commandstats")
		if err != nil {
			return counters{}, fmt.Errorf("INFO commandstats on %s: %w", a, err)
		}
		calls, err := commandField(info, "calls")
		if err != nil {
			return counters{}, err
		}
		usec, err := commandField(info, "usec")
		if err != nil {
			return counters{}, err
		}
		delete(calls, "info") // the INFO calls that read these stats
		for name, n := range calls {
			c.Calls[name] += n
		}
		c.ScriptUsec += usec["evalsha"] + usec["eval"]
	}
	return c, nil
}

// scrapeMetrics reads unlabelled counters from a Prometheus text
// exposition, with Prometheus's own parser.
func scrapeMetrics(ctx context.Context, url string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	out := make([]float64, len(names))
	for i, name := range names {
		f := families[name]
		if f == nil || len(f.GetMetric()) != 1 {
			return nil, fmt.Errorf("reading %s: no one counter %s", url, name)
		}
		out[i] = f.GetMetric()[0].GetCounter().GetValue()
	}
	return out, nil
}

// commandField reads one integer field of every INFO commandstats line,
// by command; a line without it is left out.
func commandField(info, field string) (map[string]int64, error) {
	out := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(f, "="); k == field {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("INFO commandstats: %q: %w", line, err)
				}
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out, nil
}
