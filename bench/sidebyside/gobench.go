package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/stat"
)

// The Go benchmarks the side-by-side runs: local key memory
// (limiter/memory_bench_test.go) and what Redis holds once Redis is what
// runs out, one server against a 3-master Cluster, each capped at a tenth
// of a core (limiter/redislimit/capacity_test.go).
const (
	memoryBench   = "BenchmarkLocalKeyMemory"
	capacityBench = "BenchmarkRedisCapacity"
)

// The names of the capacity RATIO (and TARGET) lines.
const (
	capacityRatioName = "redis-capacity cluster-3/standalone"
	capacityCPUName   = "redis-cpu-per-decision-saturated cluster-3/standalone"
)

// runMemory runs memoryBench once (it fills a million keys per case),
// copies its result lines and sets the memory values.
func runMemory(ctx context.Context, w io.Writer, goBin, root string, values map[string]ratio) error {
	out, err := goTest(ctx, goBin, root, "-run", "^$", "-bench", "^"+memoryBench+"$", "-benchtime", "1x", "-count", "1", "./limiter/")
	if err != nil {
		return err
	}
	m, err := parseBenchOutput(w, memoryBench, out)
	if err != nil {
		return err
	}
	for name, key := range map[string][2]string{
		"local-bytes-per-key":     {"cap=2M/keys=1M", "B/key"},
		"local-bytes-per-cap-key": {"cap=100k/keys=1M", "B/cap-key"},
	} {
		v, ok := m[key[0]][key[1]]
		values[name] = ratio{name: name, value: v, ok: ok}
	}
	return nil
}

// runCapacity runs capacityBench once a round, each its own go test, and
// sets its ratios: the median over the rounds of each round's own ratio.
// Where it cannot cap a server (not root, no cgroup cpu controller) it
// skips, and so does this, with its reason.
func runCapacity(ctx context.Context, w io.Writer, goBin, root string, rounds int, values map[string]ratio) error {
	var decisions, cpu []float64
	for range rounds {
		// -v: a skip's reason is printed only then.
		out, err := goTest(ctx, goBin, root, "-v", "-run", "^$", "-bench", "^"+capacityBench+"$", "-benchtime", "3s", "-count", "1", "./limiter/redislimit/")
		if err != nil {
			return err
		}
		if i := strings.Index(out, "--- SKIP: "+capacityBench); i >= 0 {
			fmt.Fprintf(w, "# %s not measured: %s\n", capacityBench, lastLog(out[:i]))
			return nil
		}
		m, err := parseBenchOutput(w, capacityBench, out)
		if err != nil {
			return err
		}
		c, s := m["cluster-3"], m["standalone"]
		if s["decisions/s"] > 0 && s["redis-cpu-µs/decision"] > 0 {
			decisions = append(decisions, c["decisions/s"]/s["decisions/s"])
			cpu = append(cpu, c["redis-cpu-µs/decision"]/s["redis-cpu-µs/decision"])
		}
	}
	values[capacityRatioName] = ratio{name: capacityRatioName, value: stat.Median(decisions), ok: len(decisions) > 0}
	values[capacityCPUName] = ratio{name: capacityCPUName, value: stat.Median(cpu), ok: len(cpu) > 0}
	return nil
}

// lastLog is the last "file.go:N: reason" line's reason in out.
func lastLog(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if place, why, ok := strings.Cut(strings.TrimSpace(lines[i]), ": "); ok && strings.Contains(place, ".go:") {
			return why
		}
	}
	return "skipped, no reason given"
}

// goTest runs "go test args..." in root and returns its output.
func goTest(ctx context.Context, goBin, root string, args ...string) (string, error) {
	args = append([]string{"test"}, args...)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", goBin, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// parseBenchOutput copies bench's result lines to w (they are benchmark
// format already) and returns each sub-benchmark's metrics by unit:
// "BenchmarkX/sub-2  1  123 ns/op  103.8 B/key" → sub → B/key → 103.8.
func parseBenchOutput(w io.Writer, bench, out string) (map[string]map[string]float64, error) {
	m := map[string]map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], bench+"/") {
			continue
		}
		name := strings.TrimPrefix(f[0], bench+"/")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the -GOMAXPROCS suffix
		}
		units := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", bench, line, err)
			}
			units[f[i+1]] = v
		}
		m[name] = units
		fmt.Fprintln(w, strings.Join(f, " "))
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%s printed no results: %s", bench, out)
	}
	return m, nil
}
