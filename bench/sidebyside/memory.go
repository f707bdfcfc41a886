package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// memoryBench is the Go microbenchmark of local key memory.
const memoryBench = "BenchmarkLocalKeyMemory"

// benchResult is what one run of a Go benchmark reported: each
// sub-benchmark's metrics by unit ("B/key", "decisions/s", ...), and its
// result lines as printed.
type benchResult struct {
	metrics map[string]map[string]float64 // sub-benchmark → unit → value
	lines   []string
}

// metric returns a sub-benchmark's metric, if it was reported.
func (m benchResult) metric(sub, unit string) (float64, bool) {
	v, ok := m.metrics[sub][unit]
	return v, ok
}

// runMemoryBench runs memoryBench once (it fills a million keys per case).
func runMemoryBench(ctx context.Context, goBin, root string) (benchResult, error) {
	out, err := goTest(ctx, goBin, root, "-run", "^$", "-bench", "^"+memoryBench+"$", "-benchtime", "1x", "-count", "1", "./limiter/")
	if err != nil {
		return benchResult{}, err
	}
	return parseBenchOutput(memoryBench, out)
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

// parseBenchOutput reads the `go test -bench` result lines of bench, run
// once: "BenchmarkX/sub-2  1  123 ns/op  103.8 B/key  1000000 keys".
func parseBenchOutput(bench, out string) (benchResult, error) {
	m := benchResult{metrics: map[string]map[string]float64{}}
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
				return benchResult{}, fmt.Errorf("%s: %q: %w", bench, line, err)
			}
			units[f[i+1]] = v
		}
		m.metrics[name] = units
		m.lines = append(m.lines, strings.Join(f, " "))
	}
	if len(m.lines) == 0 {
		return benchResult{}, fmt.Errorf("%s printed no results: %s", bench, out)
	}
	return m, nil
}
