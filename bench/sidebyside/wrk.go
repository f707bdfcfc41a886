package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// load is how wrk loads every target: the same for all of them.
type load struct {
	threads, connections int
	duration             time.Duration
}

// sample is what one wrk run measured.
type sample struct {
	RPS      float64       // Requests/sec: every response, 429s included
	P50, P99 time.Duration // Latency Distribution
	Requests int64         // "N requests in ..."
	Non2xx   int64         // "Non-2xx or 3xx responses: N", 0 when absent
	Errors   int64         // socket errors: connect + read + write + timeout
	// Delta is what the target's counters moved during the run (Redis
	// targets only).
	Delta *counters
	// CPU is what the run cost the target's own servers (perf stat's
	// task-clock), zero when not counted.
	CPU time.Duration
}

// line is the run as a line of Go's benchmark format: benchstat reads it.
// Latencies are in µs; a Redis target adds what its counters moved.
func (r sample) line(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "BenchmarkClosed/%s %d %.0f req/s %.1f µs-p50 %.1f µs-p99 %d non2xx %d errors",
		benchName(name), r.Requests, r.RPS, usec(r.P50), usec(r.P99), r.Non2xx, r.Errors)
	if r.CPU > 0 && r.Requests > 0 {
		fmt.Fprintf(&b, " %.2f cpu-µs/req", usec(r.CPU)/float64(r.Requests))
	}
	if d := r.Delta; d != nil {
		fmt.Fprintf(&b, " %.0f redis-round-trips %d redis-commands %d redis-script-µs %.0f overloaded", d.RoundTrips, d.commands(), d.ScriptUsec, d.Overloaded)
	}
	return b.String()
}

// benchName is a target's name as a benchmark's: target=X, with
// build=new for the gateway's and build=base for a base: target's, so
// that benchstat -col /build sets the two builds side by side.
func benchName(name string) string {
	if kind, ok := strings.CutPrefix(name, basePrefix); ok {
		return "target=" + kind + "/build=base"
	}
	if strings.HasPrefix(name, "gateway-") {
		return "target=" + name + "/build=new"
	}
	return "target=" + name
}

func usec(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// wrk loads t for d and parses the report; pin (a taskset prefix, or nil)
// is where wrk runs. Cancelling ctx kills wrk.
func wrk(ctx context.Context, l load, pin []string, d time.Duration, t *target) (sample, error) {
	args := []string{"-t" + strconv.Itoa(l.threads), "-c" + strconv.Itoa(l.connections),
		"-d" + wrkDuration(d), "--latency"}
	if t.script != "" {
		args = append(args, "-s", t.script)
	}
	for name, vs := range t.header {
		if t.script == "" { // a script sets its own
			for _, v := range vs {
				args = append(args, "-H", name+": "+v)
			}
		}
	}
	args = append(args, t.url)
	// A run that hangs (a stuck connection past wrk's own timeout) is cut
	// off at twice its duration plus a margin.
	ctx, cancel := context.WithTimeout(ctx, 2*d+10*time.Second)
	defer cancel()
	argv := append(append(slices.Clone(pin), "wrk"), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("wrk %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	r, err := parseWrk(out.String())
	if err != nil {
		return sample{}, fmt.Errorf("wrk %s: %w", strings.Join(args, " "), err)
	}
	return r, nil
}

// wrkDuration writes d as wrk reads it: whole seconds (wrk knows no
// smaller unit; the flags are checked to be whole seconds).
func wrkDuration(d time.Duration) string {
	return strconv.Itoa(int(d/time.Second)) + "s"
}

// parseWrk reads wrk's report (run with --latency).
func parseWrk(out string) (sample, error) {
	var r sample
	var seen struct{ rps, p50, p99, requests bool }
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return sample{}, fmt.Errorf("parsing Requests/sec: %w", err)
			}
			r.RPS, seen.rps = v, true
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			v, err := parseWrkTime(f[1])
			if err != nil {
				return sample{}, fmt.Errorf("latency %s: %w", f[0], err)
			}
			if f[0] == "50%" {
				r.P50, seen.p50 = v, true
			} else {
				r.P99, seen.p99 = v, true
			}
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			v, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return sample{}, fmt.Errorf("requests: %w", err)
			}
			r.Requests, seen.requests = v, true
		case strings.HasPrefix(strings.TrimSpace(line), "Non-2xx or 3xx responses:"):
			v, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err != nil {
				return sample{}, fmt.Errorf("non-2xx: %w", err)
			}
			r.Non2xx = v
		case strings.HasPrefix(strings.TrimSpace(line), "Socket errors:"):
			// Socket errors: connect 0, read 0, write 0, timeout 0
			for i := 2; i+1 < len(f); i += 2 {
				v, err := strconv.ParseInt(strings.TrimSuffix(f[i+1], ","), 10, 64)
				if err != nil {
					return sample{}, fmt.Errorf("socket errors: %w", err)
				}
				r.Errors += v
			}
		}
	}
	if !seen.rps || !seen.p50 || !seen.p99 || !seen.requests {
		return sample{}, fmt.Errorf("incomplete wrk report (was it run with --latency?): %q", out)
	}
	return r, nil
}

// parseWrkTime reads wrk's latencies: "812.00us", "1.23ms", "2.00s", "1.50m".
func parseWrkTime(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(v * float64(u.unit)), nil
		}
	}
	return 0, fmt.Errorf("unknown unit in %q", s)
}
