package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// roundTripsMetric counts the gateway's decisions that asked Redis.
const roundTripsMetric = "gateway_redis_round_trips_total"

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
	// scripts' own commands included): its CPU for the decisions.
	ScriptUsec int64
}

// sub is c - o.
func (c counters) sub(o counters) counters {
	d := counters{RoundTrips: c.RoundTrips - o.RoundTrips, Calls: map[string]int64{}, ScriptUsec: c.ScriptUsec - o.ScriptUsec}
	for name, n := range c.Calls {
		if n -= o.Calls[name]; n != 0 {
			d.Calls[name] = n
		}
	}
	return d
}

// add adds o to c.
func (c *counters) add(o counters) {
	c.RoundTrips += o.RoundTrips
	c.ScriptUsec += o.ScriptUsec
	if c.Calls == nil {
		c.Calls = map[string]int64{}
	}
	for name, n := range o.Calls {
		c.Calls[name] += n
	}
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
	rt, err := scrapeMetric(ctx, metricsURL, roundTripsMetric)
	if err != nil {
		return counters{}, err
	}
	c := counters{RoundTrips: rt, Calls: map[string]int64{}}
	for _, a := range redisAddrs {
		info, err := redistest.Do(a, "INFO", "commandstats")
		if err != nil {
			return counters{}, fmt.Errorf("INFO commandstats on %s: %w", a, err)
		}
		calls, err := commandCalls(info)
		if err != nil {
			return counters{}, err
		}
		delete(calls, "info") // the INFO calls that read these stats
		for name, n := range calls {
			c.Calls[name] += n
		}
		c.ScriptUsec += scriptUsec(info)
	}
	return c, nil
}

// scriptUsec is the usec of INFO commandstats' evalsha and eval lines.
func scriptUsec(info string) int64 {
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(field, "="); k == "usec" {
				u, _ := strconv.ParseInt(v, 10, 64)
				n += u
			}
		}
	}
	return n
}

// scrapeMetric reads one unlabelled sample from a Prometheus text exposition.
func scrapeMetric(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading %s: %s", url, resp.Status)
	}
	return findMetric(resp.Body, name)
}

// findMetric returns the value of the sample "name value" in r.
func findMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// commandCalls reads INFO commandstats' lines "cmdstat_<name>:calls=N,...".
func commandCalls(info string) (map[string]int64, error) {
	calls := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(field, "="); k == "calls" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("INFO commandstats: %q: %w", line, err)
				}
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls, nil
}
