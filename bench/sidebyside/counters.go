package main

import (
	"bufio"
	"bytes"
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
	// scripts' own commands included): its CPU for the decisions.
	ScriptUsec int64
	// Overloaded is the gateway's overloadedMetric.
	Overloaded float64
	// CPU is the Redis processes' CPU time (INFO cpu: used_cpu_user +
	// used_cpu_sys), in seconds: all a server spent, reading and writing
	// included, where ScriptUsec is the time inside the scripts, wall
	// time that a loaded machine inflates whenever it preempts Redis.
	CPU float64
	// Nodes are the same, per Redis server.
	Nodes map[string]*nodeCounters
}

// nodeCounters are one Redis server's INFO commandstats calls and usec by
// command, and its CPU time in seconds.
type nodeCounters struct {
	Calls, Usec map[string]int64
	CPU         float64
}

// sub is c - o.
func (c counters) sub(o counters) counters {
	d := counters{RoundTrips: c.RoundTrips - o.RoundTrips, Calls: subCounts(c.Calls, o.Calls), ScriptUsec: c.ScriptUsec - o.ScriptUsec,
		Overloaded: c.Overloaded - o.Overloaded, CPU: c.CPU - o.CPU, Nodes: map[string]*nodeCounters{}}
	for addr, n := range c.Nodes {
		on := o.Nodes[addr]
		if on == nil {
			on = &nodeCounters{}
		}
		d.Nodes[addr] = &nodeCounters{Calls: subCounts(n.Calls, on.Calls), Usec: subCounts(n.Usec, on.Usec), CPU: n.CPU - on.CPU}
	}
	return d
}

// subCounts is a - b by name, leaving out the names whose count did not change.
func subCounts(a, b map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for name, n := range a {
		if n -= b[name]; n != 0 {
			d[name] = n
		}
	}
	return d
}

// add adds o to c.
func (c *counters) add(o counters) {
	c.RoundTrips += o.RoundTrips
	c.ScriptUsec += o.ScriptUsec
	c.Overloaded += o.Overloaded
	c.CPU += o.CPU
	c.Calls = addCounts(c.Calls, o.Calls)
	if c.Nodes == nil {
		c.Nodes = map[string]*nodeCounters{}
	}
	for addr, on := range o.Nodes {
		n := c.Nodes[addr]
		if n == nil {
			n = &nodeCounters{}
			c.Nodes[addr] = n
		}
		n.Calls, n.Usec, n.CPU = addCounts(n.Calls, on.Calls), addCounts(n.Usec, on.Usec), n.CPU+on.CPU
	}
}

// addCounts adds b to a, made if nil, and returns a.
func addCounts(a, b map[string]int64) map[string]int64 {
	if a == nil {
		a = map[string]int64{}
	}
	for name, n := range b {
		a[name] += n
	}
	return a
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
	c := counters{RoundTrips: ms[0], Overloaded: ms[1], Calls: map[string]int64{}, Nodes: map[string]*nodeCounters{}}
	for _, a := range redisAddrs {
		info, err := redistest.Do(a, "INFO", "commandstats")
		if err != nil {
			return counters{}, fmt.Errorf("INFO commandstats on %s: %w", a, err)
		}
		calls, err := commandCalls(info)
		if err != nil {
			return counters{}, err
		}
		cpuInfo, err := redistest.Do(a, "INFO", "cpu")
		if err != nil {
			return counters{}, fmt.Errorf("INFO cpu on %s: %w", a, err)
		}
		delete(calls, "info") // the INFO calls that read these stats
		usec, err := commandField(info, "usec")
		if err != nil {
			return counters{}, err
		}
		cpu, err := redistest.ParseCPU(cpuInfo)
		if err != nil {
			return counters{}, fmt.Errorf("%s: %w", a, err)
		}
		n := &nodeCounters{Calls: calls, Usec: usec, CPU: cpu.Seconds()}
		delete(n.Usec, "info")
		c.Nodes[a] = n
		c.Calls = addCounts(c.Calls, calls)
		c.ScriptUsec += n.Usec["evalsha"] + n.Usec["eval"]
		c.CPU += n.CPU
	}
	return c, nil
}

// scrapeMetrics reads unlabelled samples from a Prometheus text exposition.
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
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	out := make([]float64, len(names))
	for i, name := range names {
		if out[i], err = findMetric(bytes.NewReader(body), name); err != nil {
			return nil, err
		}
	}
	return out, nil
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
	return commandField(info, "calls")
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
