// Command sidebyside benchmarks the gateway side by side with nginx,
// HAProxy, Caddy and a bare httputil.ReverseProxy, in one run on loopback,
// all in front of the same nginx upstream and loaded by the same wrk
// settings. It prints a table of medians, RATIO lines, and TARGET lines
// that say whether each performance target was met (it exits 0 either way:
// it reports), and writes all of it to a new file in bench/results/.
// See bench/README.md.
//
//	go run ./bench/sidebyside [-rounds 5] [-duration 3s] [-threads 1] [-connections 64]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/plot"
)

// options are the command's flags.
type options struct {
	load
	rounds     int
	warmup     time.Duration
	only       string
	resultsDir string
	goBin      string
	memory     bool
	capacity   bool
	cheap      bool
	curves     bool
	keep       bool
	open       openOptions
	openRates  string
	pinMode    string
	pin        pinning
	base       string
	generate   bool
}

func main() {
	var o options
	flag.IntVar(&o.threads, "threads", 1, "wrk -t: threads")
	flag.IntVar(&o.connections, "connections", 64, "wrk -c: connections kept open; also the most the open-loop generator opens")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "wrk -d: each measured run (whole seconds)")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds over every target (at least 3 for a result)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "one unmeasured wrk run per target before the rounds (0: none)")
	flag.StringVar(&o.only, "only", "", "comma-separated targets to run (default all; ratios needing others print n/a)")
	flag.StringVar(&o.resultsDir, "results", "bench/results", "directory for the results file; a relative one is under the module root (\"\": none)")
	flag.StringVar(&o.goBin, "go", "go", "the go command used to build and to run the memory benchmark")
	flag.BoolVar(&o.memory, "memory", true, "run the local key memory microbenchmark too")
	flag.BoolVar(&o.capacity, "capacity", true, "measure what one Redis and a 3-master Cluster hold with each server capped at a tenth of a core (needs root and a cgroup cpu controller)")
	flag.BoolVar(&o.cheap, "cheap", true, "measure an admitted small llm call's p99 idle and with keyless 1 MiB prompts in flight")
	flag.BoolVar(&o.curves, "curves", false, "measure how cost grows with the work instead (docs/scaling.md): policies, routes, API keys, client keys, prompt size")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (configs, logs) and print its path")
	flag.IntVar(&o.open.rounds, "open-rounds", 3, "open-loop rounds over every open-loop target at every rate (0: no open loop)")
	flag.StringVar(&o.openRates, "open-rates", "25,50,75", "open-loop rates, in percent of the slowest open-loop target's closed-loop median rps")
	flag.DurationVar(&o.open.minDuration, "open-duration", 2*time.Second, "each open-loop point is measured for at least this long")
	flag.IntVar(&o.open.samples, "open-samples", 10000, "and for long enough to send this many requests (at most "+openMaxPoint.String()+")")
	flag.DurationVar(&o.open.slice, "open-slice", 100*time.Millisecond, "the open-loop targets of a rate are measured in turns of this long, so that a stall of the machine falls on them alike (0: one after the other)")
	flag.StringVar(&o.pinMode, "pin", "auto", "taskset the load generators to the last CPU and the servers to the others: auto (on 4+ CPUs), on, off")
	flag.StringVar(&o.base, "base", "", "a git revision whose gateway is built too and measured beside this one as base:gateway-*")
	flag.BoolVar(&o.generate, generateFlag, false, "internal: be the open-loop generator for one rate's points (JSON on stdin and stdout)")
	flag.Parse()

	if o.generate {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := runGenerator(ctx, os.Stdin, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintf(os.Stderr, "sidebyside -%s: %v\n", generateFlag, err)
			os.Exit(1)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case interrupted:
		fmt.Fprintln(os.Stderr, "sidebyside: interrupted; every server it started is stopped, no results file written")
		os.Exit(130)
	case errors.Is(err, errMissingTools):
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "sidebyside: %v\n", err)
		os.Exit(1)
	}
}

func (o *options) check() error {
	var err error
	if o.open.pcts, err = parsePercents(o.openRates); err != nil {
		return err
	}
	if o.pin, err = resolvePin(o.pinMode, runtime.NumCPU()); err != nil {
		return err
	}
	switch {
	case o.open.rounds < 0 || o.open.samples < 0 || o.open.minDuration <= 0 || o.open.slice < 0:
		return errors.New("-open-rounds, -open-samples and -open-slice must be >= 0, -open-duration > 0")
	case o.threads < 1 || o.connections < o.threads:
		return errors.New("-threads must be >= 1 and -connections >= -threads")
	case o.duration < time.Second || o.duration%time.Second != 0:
		return fmt.Errorf("-duration must be whole seconds (wrk's unit), got %v", o.duration)
	case o.warmup < 0 || o.warmup%time.Second != 0:
		return fmt.Errorf("-warmup must be whole seconds, got %v", o.warmup)
	case o.rounds < 1:
		return errors.New("-rounds must be >= 1")
	}
	return nil
}

func run(ctx context.Context, o options) error {
	if err := o.check(); err != nil {
		return err
	}
	sel, err := selectSpecs(o.only)
	if err != nil {
		return err
	}
	root, err := moduleRoot(ctx, o.goBin)
	if err != nil {
		return err
	}
	if err := ensureTools(ctx, os.Stderr); err != nil {
		return err
	}
	if o.curves {
		return runCurves(ctx, o, root)
	}
	tmp, cleanup, err := workDir("sidebyside-", o.keep)
	if err != nil {
		return err
	}
	defer cleanup()

	var report bytes.Buffer
	w := io.MultiWriter(os.Stdout, &report)
	start := time.Now()
	writeHeader(ctx, w, o, root, start)

	bins, err := build(ctx, o.goBin, root, tmp)
	if err != nil {
		return err
	}
	var baseBin string
	if o.base != "" {
		var commit string
		if baseBin, commit, err = buildBase(ctx, o.goBin, root, tmp, o.base); err != nil {
			return err
		}
		fmt.Fprintf(w, "base:                  %s = %s (its gateway-* targets run as %sgateway-*)\n", o.base, commit, basePrefix)
	}
	var mem *benchResult
	if o.memory {
		fmt.Fprintf(w, "\n## Local key memory (go test -bench %s -benchtime 1x ./limiter/)\n\n", memoryBench)
		m, err := runMemoryBench(ctx, o.goBin, root)
		if err != nil {
			return err
		}
		for _, line := range m.lines {
			fmt.Fprintln(w, line)
		}
		mem = &m
	}
	var capacity *capacityRun
	if o.capacity {
		if capacity, err = runCapacity(ctx, w, o.goBin, root, o.rounds); err != nil {
			return err
		}
	}

	ps, err := newProcs(filepath.Join(tmp, "logs"), o.pin.servers)
	if err != nil {
		return err
	}
	defer ps.stopAll()
	l := &lab{ps: ps, dir: tmp, gateway: bins.gateway, bare: bins.bare, baseGateway: baseBin}
	defer l.close()
	targets, err := l.startTargets(ctx, sel)
	if err != nil {
		return err
	}
	runs, err := measure(ctx, w, o, targets, l.upstreamProc)
	if err != nil {
		return err
	}
	var open *openRun
	if set := l.openSet(targets); o.open.rounds > 0 && len(set) > 1 {
		if open, err = measureOpen(ctx, w, o, set, runs); err != nil {
			return err
		}
	}
	if o.cheap && l.upstream != "" {
		if err := l.measureCheap(ctx, w); err != nil {
			return err
		}
	}
	logWarnings := append(l.warnings, ps.logWarnings()...)
	ps.stopAll()

	charts := writeResults(w, o, targets, runs, open, mem, capacity, logWarnings, time.Since(start))
	if o.resultsDir == "" {
		return nil
	}
	dir := o.resultsDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	path, err := saveResults(dir, start, report.Bytes())
	if err != nil {
		return err
	}
	fmt.Printf("\nwritten to %s\n", path)
	for _, c := range charts {
		svg := strings.TrimSuffix(path, ".txt") + c.suffix + ".svg"
		if err := plot.SaveSVG(svg, c.charts...); err != nil {
			return err
		}
		fmt.Printf("chart: %s\n", svg)
	}
	return nil
}

// workDir makes the run's temp dir (configs, logs, binaries); cleanup
// removes it, unless keep, when its path is printed instead.
func workDir(prefix string, keep bool) (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintf(os.Stderr, "configs and logs: %s\n", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// measure warms every target, then runs the rounds: each round runs every
// target once, in an order that changes from round to round (rotated by the
// round number, odd rounds backwards), so no target always runs at the same
// point of a round or after the same neighbour. It returns each target's
// runs in round order. upstream is the upstream's server, whose CPU time
// each run also reads.
func measure(ctx context.Context, w io.Writer, o options, targets []*target, upstream *proc) (map[string][]sample, error) {
	if o.warmup > 0 {
		fmt.Fprintf(w, "\n## Warm-up (%v each, not measured)\n\n", o.warmup)
		for _, t := range targets {
			r, _, err := wrk(ctx, o.load, o.pin.generator, o.warmup, t)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(w, "warm  %-23s rps=%.0f non2xx=%d errors=%d\n", t.name, r.RPS, r.Non2xx, r.Errors)
		}
	}
	fmt.Fprintf(w, "\n## Runs (wrk -t%d -c%d -d%s --latency, %d rounds)\n\n", o.threads, o.connections, wrkDuration(o.duration), o.rounds)
	runs := make(map[string][]sample, len(targets))
	for round := range o.rounds {
		for _, t := range roundOrder(targets, round) {
			r, err := measureOne(ctx, o, t, upstream)
			if err != nil {
				return nil, err
			}
			runs[t.name] = append(runs[t.name], r)
			fmt.Fprintf(w, "round %d/%d  %-23s rps=%-9.0f p50=%sms p99=%sms non2xx=%d requests=%d errors=%d%s%s\n",
				round+1, o.rounds, t.name, r.RPS, ms(r.P50), ms(r.P99), r.Non2xx, r.Requests, r.Errors, cpuNote(r), deltaNote(r.Delta))
		}
	}
	return runs, nil
}

// measureOne is one wrk run, with the target's counters and the CPU time
// of its servers and of the upstream read around it.
func measureOne(ctx context.Context, o options, t *target, upstream *proc) (sample, error) {
	var before counters
	if t.counters != nil {
		var err error
		if before, err = t.counters(ctx); err != nil {
			return sample{}, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	var up []*proc
	if upstream != nil && !slices.Contains(t.own, upstream) {
		up = []*proc{upstream}
	}
	cpu0, err := serversCPU(t.own, up)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", t.name, err)
	}
	r, _, err := wrk(ctx, o.load, o.pin.generator, o.duration, t)
	if err != nil {
		return sample{}, err
	}
	cpu1, err := serversCPU(t.own, up)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", t.name, err)
	}
	r.CPU.own, r.CPU.upstream = cpu1.own-cpu0.own, cpu1.upstream-cpu0.upstream
	if t.counters != nil {
		after, err := t.counters(ctx)
		if err != nil {
			return sample{}, fmt.Errorf("%s: %w", t.name, err)
		}
		d := after.sub(before)
		r.Delta = &d
	}
	return r, nil
}

// cpuNote is a run's CPU time a request: the target's servers', the
// upstream's and wrk's.
func cpuNote(r sample) string {
	return fmt.Sprintf(" cpu_us=%.1f/%.1f/%.1f", usec(perRequest(r.CPU.own, r.Requests)),
		usec(perRequest(r.CPU.upstream, r.Requests)), usec(perRequest(r.CPU.generator, r.Requests)))
}

func deltaNote(d *counters) string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf(" redis_round_trips=%.0f redis_commands=%d", d.RoundTrips, d.commands())
}

// roundOrder is the order of one round: the targets, backwards in odd
// rounds, rotated by the round number.
func roundOrder(targets []*target, round int) []*target {
	base := slices.Clone(targets)
	if round%2 == 1 {
		slices.Reverse(base)
	}
	n := len(base)
	out := make([]*target, n)
	for i := range n {
		out[i] = base[(i+round)%n]
	}
	return out
}

// writeHeader writes what the run is: when, how, on what, with what.
func writeHeader(ctx context.Context, w io.Writer, o options, root string, start time.Time) {
	fmt.Fprintf(w, "# Side-by-side benchmark, %s\n\n", start.Format(time.RFC3339))
	fmt.Fprintf(w, "command: %s\n", strings.Join(append([]string{"go run ./bench/sidebyside"}, os.Args[1:]...), " "))
	fmt.Fprintf(w, "load: wrk -t%d -c%d -d%s --latency; %d rounds, warm-up %v; medians over rounds\n",
		o.threads, o.connections, wrkDuration(o.duration), o.rounds, o.warmup)
	if o.open.rounds > 0 {
		fmt.Fprintf(w, "open loop: %s%% of the slowest open-loop target's median rps, %d rounds, each point >= %v and >= %d requests (at most %v), %s, one generator process a rate a round (this binary, vegeta, at most %d keep-alive connections a target)\n",
			o.openRates, o.open.rounds, o.open.minDuration, o.open.samples, openMaxPoint, turns(o.open.slice), o.connections)
	}
	fmt.Fprintf(w, "pinning: %s\n", o.pin.about)
	if o.rounds < 3 {
		fmt.Fprintln(w, "NOTE: fewer than 3 rounds: a development run, not a result")
	}
	fmt.Fprintln(w, "\n## Machine")
	for _, kv := range machine() {
		fmt.Fprintf(w, "%-22s %s\n", kv[0]+":", kv[1])
	}
	fmt.Fprintln(w, "\n## Versions")
	for _, kv := range versions(ctx, o.goBin, root) {
		fmt.Fprintf(w, "%-22s %s\n", kv[0]+":", kv[1])
	}
}

// writeResults writes the table, RATIO, TARGET and WARN lines, and
// returns the charts of the run.
func writeResults(w io.Writer, o options, targets []*target, runs map[string][]sample, open *openRun, mem *benchResult, capacity *capacityRun, logWarnings []string, took time.Duration) []chartFile {
	sums := make([]summary, 0, len(targets))
	by := make(map[string]summary, len(targets))
	for _, t := range targets {
		s := summarize(t, runs[t.name])
		sums = append(sums, s)
		by[t.name] = s
	}
	fmt.Fprintf(w, "\n## Results (medians of %d rounds; non-2xx, requests and errors summed)\n\n", o.rounds)
	writeTable(w, sums)
	fmt.Fprintln(w, "\nrps by round:")
	writeRounds(w, sums)

	fmt.Fprintln(w, "\nCPU time a request (medians of the rounds; Redis summed over them): the target's own servers, its Redis, the upstream, wrk:")
	writeCPU(w, sums)

	fmt.Fprintln(w, "\nRedis, summed over the rounds:")
	writeRedis(w, sums, o.duration)

	var openSums []openSummary
	if open != nil {
		openSums = summarizeOpen(open)
		writeOpen(w, open, openSums)
	}

	fmt.Fprintln(w, "\ntargets:")
	for _, t := range targets {
		fmt.Fprintf(w, "  %-23s %s (%s)\n", t.name, t.about, t.url)
	}

	fmt.Fprintln(w)
	values := map[string]ratio{}
	all := ratios(by)
	if open != nil {
		all = append(all, openRatios(openSums, "")...)
	}
	if capacity != nil {
		all = append(all, capacity.ratios()...)
	}
	for _, r := range all {
		fmt.Fprintf(w, "RATIO %s %s\n", r.name, fmtRatio(r))
		values[r.name] = r
	}
	if mem != nil {
		v, ok := mem.metric("cap=2M/keys=1M", "B/key")
		values["local-bytes-per-key"] = ratio{name: "local-bytes-per-key", value: v, ok: ok}
		v, ok = mem.metric("cap=100k/keys=1M", "B/cap-key")
		values["local-bytes-per-cap-key"] = ratio{name: "local-bytes-per-cap-key", value: v, ok: ok}
		for _, unit := range []string{"heap-vs-cap", "heap-vs-2cap"} {
			v, ok := mem.metric("cap=100k/keys=1M", unit)
			fmt.Fprintf(w, "MEMORY local-%s %s\n", unit, fmtRatio(ratio{value: v, ok: ok}))
		}
	}
	if o.base != "" {
		writeBase(w, by, openSums)
	}
	fmt.Fprintln(w)
	checkGoals(w, values)

	warns := append(anomalies(sums), openAnomalies(openSums, o.open.samples)...)
	if open != nil {
		warns = append(warns, open.stallWarnings()...)
	}
	warns = append(warns, logWarnings...)
	if len(warns) > 0 {
		fmt.Fprintln(w)
		for _, s := range warns {
			fmt.Fprintf(w, "WARN %s\n", s)
		}
	}
	fmt.Fprintf(w, "\nfinished in %v; load average at end: %s\n", took.Round(time.Second), loadAverage())
	return runCharts(sums, open, openSums)
}

// binaries are what build made.
type binaries struct{ gateway, bare string }

// build compiles the gateway (stamped with the git commit, as a release
// is) and the bare proxy into dir.
func build(ctx context.Context, goBin, root, dir string) (binaries, error) {
	b := binaries{gateway: filepath.Join(dir, "gateway"), bare: filepath.Join(dir, "bareproxy")}
	commit, _ := exec.CommandContext(ctx, "git", "-C", root, "describe", "--always", "--dirty").Output()
	version := "bench-" + strings.TrimSpace(string(commit))
	for _, args := range [][]string{
		{"build", "-o", b.gateway, "-ldflags", "-X main.version=" + version, "./cmd/gateway"},
		{"build", "-o", b.bare, "./bench/bareproxy"},
	} {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return binaries{}, fmt.Errorf("%s %s: %w: %s", goBin, strings.Join(args, " "), err, out)
		}
	}
	return b, nil
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(ctx context.Context, goBin string) (string, error) {
	out, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run from inside the gateway module")
	}
	return filepath.Dir(gomod), nil
}

// saveResults writes report to a new file in dir named after the date and
// the CPU count (2026-12-02-2cpu.txt; -2, -3, … when that exists).
func saveResults(dir string, start time.Time, report []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	base := fmt.Sprintf("%s-%dcpu", start.Format("2006-01-02"), runtime.NumCPU())
	for i := 1; ; i++ {
		name := base + ".txt"
		if i > 1 {
			name = fmt.Sprintf("%s-%d.txt", base, i)
		}
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if _, err := f.Write(report); err != nil {
			f.Close()
			return "", err
		}
		return path, f.Close()
	}
}
