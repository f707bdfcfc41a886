package main

import (
	"strings"
	"testing"
)

func TestBenchSkipped(t *testing.T) {
	// As go test -v prints it.
	out := `goos: linux
cpu: Oxide Virtual Turin-like Processor
BenchmarkRedisCapacity
    capacity_test.go:61: cannot cap redis-server's CPU here, so cannot saturate it: redistest: cpu cap needs root
--- SKIP: BenchmarkRedisCapacity
PASS
`
	why, ok := benchSkipped(capacityBench, out)
	if !ok || why != "cannot cap redis-server's CPU here, so cannot saturate it: redistest: cpu cap needs root" {
		t.Errorf("got %q, %v; want the reason without its place", why, ok)
	}
	if _, ok := benchSkipped(capacityBench, "BenchmarkRedisCapacity/standalone-2  10  5 ns/op\nPASS\n"); ok {
		t.Error("a run that printed results read as skipped")
	}
}

// Each round's cluster is compared with that round's standalone, and the
// rounds' ratios give the median: not a ratio of medians from different
// rounds.
func TestCapacityRatiosPairTheRounds(t *testing.T) {
	round := func(cluster, standalone, cpuC, cpuS string) benchResult {
		out := "BenchmarkRedisCapacity/standalone-2  100  50000 ns/op  80 decisions/pipeline  " + standalone + " decisions/s  " + cpuS + " redis-cpu-µs/decision\n" +
			"BenchmarkRedisCapacity/cluster-3-2  300  15000 ns/op  50 decisions/pipeline  " + cluster + " decisions/s  " + cpuC + " redis-cpu-µs/decision\n"
		r, err := parseBenchOutput(capacityBench, out)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Capacity by round 3, 2, 4: median 3, where the ratio of the medians
	// would be 40000/20000 = 2. CPU by round 1, 0.5, 2: median 1, where the
	// ratio of the medians would be 5/6.
	c := capacityRun{rounds: []benchResult{
		round("30000", "10000", "5", "5"),
		round("40000", "20000", "4", "8"),
		round("90000", "22500", "12", "6"),
	}}
	got := map[string]ratio{}
	for _, r := range c.ratios() {
		got[r.name] = r
	}
	if r := got[capacityRatioName]; !r.ok || r.value != 3 {
		t.Errorf("%s = %+v, want 3 (median of 3, 2, 4)", capacityRatioName, r)
	}
	if r := got[capacityCPUName]; !r.ok || r.value != 1 {
		t.Errorf("%s = %+v, want 1 (median of 1, 0.5, 2)", capacityCPUName, r)
	}
	if rs := (&capacityRun{skipped: "no cgroup"}).ratios(); rs[0].ok || rs[1].ok || !strings.HasPrefix(rs[0].name, "redis-capacity") {
		t.Errorf("a skipped run gave %+v, want ratios that are not ok", rs)
	}
}
