package main

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// capacityBench is the Go benchmark of what Redis holds once Redis is what
// runs out: one standalone server and a 3-master Cluster, each server capped
// at a tenth of a core (limiter/redislimit/capacity_test.go).
const capacityBench = "BenchmarkRedisCapacity"

// capacitySubs are its sub-benchmarks: the Cluster, then what it is
// measured against.
const (
	capCluster    = "cluster-3"
	capStandalone = "standalone"
)

// The names of the capacity RATIO (and TARGET) lines.
var (
	capacityRatioName = "redis-capacity " + capCluster + "/" + capStandalone
	capacityCPUName   = "redis-cpu-per-decision-saturated " + capCluster + "/" + capStandalone
)

// capacityRun is capacityBench over the rounds: one result a round, or the
// reason it could not run here.
type capacityRun struct {
	rounds  []benchResult
	skipped string
}

// runCapacity runs capacityBench once a round, each its own go test, so
// that the two targets alternate as the wrk targets do.
func runCapacity(ctx context.Context, w io.Writer, goBin, root string, rounds int) (*capacityRun, error) {
	fmt.Fprintf(w, "\n## Redis capacity (go test -bench %s -benchtime 3s ./limiter/redislimit/, %d rounds)\n\n", capacityBench, rounds)
	fmt.Fprintln(w, "Each redis-server capped at a tenth of a core, 512 decisions in flight, in process: what Redis holds when it, not the gateway, runs out.")
	run := &capacityRun{}
	for i := range rounds {
		// -v: a skip's reason is printed only then.
		out, err := goTest(ctx, goBin, root, "-v", "-run", "^$", "-bench", "^"+capacityBench+"$", "-benchtime", "3s", "-count", "1", "./limiter/redislimit/")
		if err != nil {
			return nil, err
		}
		if why, ok := benchSkipped(capacityBench, out); ok {
			run.skipped = why
			fmt.Fprintf(w, "not measured: %s\n", why)
			return run, nil
		}
		r, err := parseBenchOutput(capacityBench, out)
		if err != nil {
			return nil, err
		}
		for _, line := range r.lines {
			fmt.Fprintf(w, "round %d/%d  %s\n", i+1, rounds, line)
		}
		run.rounds = append(run.rounds, r)
	}
	return run, nil
}

// benchSkipped returns the reason bench gave for skipping, when it
// skipped: go test -v prints the benchmark's log lines, then
// "--- SKIP: Bench"; the reason is the last of them.
func benchSkipped(bench, out string) (string, bool) {
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		if strings.TrimSpace(line) != "--- SKIP: "+bench {
			continue
		}
		for j := i - 1; j >= 0 && strings.TrimSpace(lines[j]) != bench; j-- {
			// "    capacity_test.go:67: cannot cap ...": the reason after its place.
			place, why, ok := strings.Cut(strings.TrimSpace(lines[j]), ": ")
			if ok && strings.Contains(place, ".go:") {
				return why, true
			}
		}
		return "skipped, no reason given", true
	}
	return "", false
}

// ratios are the capacity RATIO lines: each the median over the rounds of
// that round's own ratio (the two targets of a round ran side by side).
func (c *capacityRun) ratios() []ratio {
	per := func(name, unit string) ratio {
		var rs []float64
		for _, r := range c.rounds {
			a, okA := r.metric(capCluster, unit)
			b, okB := r.metric(capStandalone, unit)
			if okA && okB && b > 0 {
				rs = append(rs, a/b)
			}
		}
		if len(rs) == 0 {
			return ratio{name: name}
		}
		return ratio{name: name, value: median(rs), ok: true}
	}
	return []ratio{
		per(capacityRatioName, "decisions/s"),
		per(capacityCPUName, "redis-cpu-µs/decision"),
	}
}
