// Command sidebyside benchmarks the gateway side by side with nginx,
// HAProxy, Caddy and a bare httputil.ReverseProxy, in one run on loopback,
// all in front of the same nginx upstream and loaded by the same wrk
// settings, then at constant rates with vegeta. Each run of a target is one
// line in Go's benchmark format, so benchstat summarises a results file and
// compares two; what is ours is the targets, their configs and the RATIO
// and TARGET lines (ratios of medians against the anchors). It exits 0
// whether targets pass or not: it reports. See bench/README.md.
//
//	go run ./bench/sidebyside [-rounds 5] [-duration 3s] [-only a,b] [-base main]
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
)

// benchstat is the comparison tool, pinned so that every run reads alike.
const benchstat = "golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"

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
	cpu        bool
	keep       bool
	open       openOptions
	pin        string
	base       string
	h2         bool
}

func main() {
	var o options
	var rates string
	flag.IntVar(&o.threads, "threads", 1, "wrk -t: threads")
	flag.IntVar(&o.connections, "connections", 64, "wrk -c: connections kept open; also the most vegeta opens a point")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "wrk -d: each measured run (whole seconds)")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds over every target (at least 3 for a result)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "one unmeasured wrk run per target before the rounds (0: none)")
	flag.StringVar(&o.only, "only", "", "comma-separated targets to run (default all but the curves; ratios needing others print n/a)")
	flag.StringVar(&o.resultsDir, "results", "bench/results", "directory for the results file; a relative one is under the module root (\"\": none)")
	flag.StringVar(&o.goBin, "go", "go", "the go command used to build and to run the Go benchmarks")
	flag.BoolVar(&o.memory, "memory", true, "run the local key memory benchmark (BenchmarkLocalKeyMemory) too")
	flag.BoolVar(&o.capacity, "capacity", true, "run the Redis capacity benchmark (BenchmarkRedisCapacity) once a round too")
	flag.BoolVar(&o.cpu, "cpu", true, "count each run's CPU time of the target's servers with perf stat (when perf can)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (configs, logs) and print its path")
	flag.IntVar(&o.open.rounds, "open-rounds", 3, "open-loop rounds over every open-loop target at every rate (0: no open loop)")
	flag.StringVar(&rates, "open-rates", "25,50,75", "open-loop rates, in percent of the slowest open-loop target's closed-loop median rps")
	flag.DurationVar(&o.open.minDuration, "open-duration", 2*time.Second, "each open-loop point is measured for at least this long")
	flag.IntVar(&o.open.samples, "open-samples", 10000, "and for long enough to send this many requests (at most 30s)")
	flag.StringVar(&o.pin, "pin", "auto", "taskset the load generators to the last CPU and the servers to the others: auto (on 4+ CPUs), on, off")
	flag.StringVar(&o.base, "base", "", "a git revision whose gateway is built too and measured beside this one (build=base)")
	flag.BoolVar(&o.h2, "h2", false, "run the HTTP/2 targets (h2load over h2c: the gateway, nginx, Caddy) and gRPC calls (the gateway against a direct call) instead")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, rates)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case interrupted:
		fmt.Fprintln(os.Stderr, "sidebyside: interrupted; every server it started is stopped, no results file written")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "sidebyside: %v\n", err)
		os.Exit(1)
	}
}

func (o *options) check(rates string) error {
	var err error
	if o.open.pcts, err = parsePercents(rates); err != nil {
		return err
	}
	switch {
	case o.open.rounds < 0 || o.open.samples < 0 || o.open.minDuration <= 0:
		return errors.New("-open-rounds and -open-samples must be >= 0, -open-duration > 0")
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

func run(ctx context.Context, o options, rates string) error {
	if err := o.check(rates); err != nil {
		return err
	}
	gen, srv, pinned, err := pinning(o.pin, runtime.NumCPU())
	if err != nil {
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
	tmp, cleanup, err := workDir(o.keep)
	if err != nil {
		return err
	}
	defer cleanup()

	var report bytes.Buffer
	w := io.MultiWriter(os.Stdout, &report)
	start := time.Now()
	writeHeader(ctx, w, o, root, start, pinned)

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
		fmt.Fprintf(w, "# base: %s\n", commit)
	}
	values := map[string]ratio{}
	if o.h2 {
		o.memory, o.capacity = false, false
	}
	if o.memory {
		if err := runMemory(ctx, w, o.goBin, root, values); err != nil {
			return err
		}
	}
	if o.capacity {
		if err := runCapacity(ctx, w, o.goBin, root, o.rounds, values); err != nil {
			return err
		}
	}

	ps, err := newProcs(filepath.Join(tmp, "logs"), srv)
	if err != nil {
		return err
	}
	defer ps.stopAll()
	l := &lab{ps: ps, dir: tmp, gateway: bins.gateway, bare: bins.bare, baseGateway: baseBin}
	defer l.close()
	if o.h2 {
		if err := runH2(ctx, w, o, l); err != nil {
			return err
		}
		ps.stopAll()
		return finish(w, o, root, start, &report, ps.logWarnings())
	}
	targets, err := l.startTargets(ctx, sel)
	if err != nil {
		return err
	}
	perf := o.cpu && perfWorks(ctx)
	if o.cpu && !perf {
		fmt.Fprintln(w, "# cpu: perf stat cannot count here (kernel.perf_event_paranoid, no perf): no cpu-µs/req")
	}
	runs, err := measure(ctx, w, o, gen, perf, targets)
	if err != nil {
		return err
	}
	var open map[string][]openPoint
	if set := l.openSet(targets); o.open.rounds > 0 && len(set) > 1 {
		var keep string
		if o.keep {
			keep = filepath.Join(tmp, "openloop.bin")
		}
		if open, err = measureOpen(ctx, w, o, set, runs, keep); err != nil {
			return err
		}
	}
	warns := append(l.warnings, ps.logWarnings()...)
	ps.stopAll()

	fmt.Fprintln(w)
	writeRatios(w, runs, open, values)
	return finish(w, o, root, start, &report, append(warns, anomalies(targets, runs)...))
}

// finish writes the warnings and the run's end, then the results file.
func finish(w io.Writer, o options, root string, start time.Time, report *bytes.Buffer, warns []string) error {
	for _, s := range warns {
		fmt.Fprintf(w, "WARN %s\n", s)
	}
	fmt.Fprintf(w, "\n# finished in %v; load average at end: %s\n", time.Since(start).Round(time.Second), loadAverage())
	path := resultsPath(o, root, start)
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, report.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nwritten to %s\nsummary: %s run %s %s\n", path, o.goBin, benchstat, path)
	return nil
}

// resultsPath is the run's results file, named after the date and CPU
// count, and -tls for -only tls, -lean for -only lean (-2, -3, … when
// taken); "" when -results is "".
func resultsPath(o options, root string, start time.Time) string {
	if o.resultsDir == "" {
		return ""
	}
	dir := o.resultsDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%dcpu", start.Format("2006-01-02"), runtime.NumCPU()))
	if o.only == "tls" || o.only == "lean" {
		base += "-" + o.only
	}
	if o.h2 {
		base += "-h2"
	}
	for i := 1; ; i++ {
		p := base
		if i > 1 {
			p = fmt.Sprintf("%s-%d", base, i)
		}
		if _, err := os.Stat(p + ".txt"); errors.Is(err, os.ErrNotExist) {
			return p + ".txt"
		}
	}
}

// workDir makes the run's temp dir (configs, logs, binaries); cleanup
// removes it, unless keep, when its path is printed instead.
func workDir(keep bool) (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "sidebyside-")
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
// target once, in an order that changes from round to round, and prints one
// benchmark line a run. It returns each target's runs in round order.
func measure(ctx context.Context, w io.Writer, o options, gen []string, perf bool, targets []*target) (map[string][]sample, error) {
	if o.warmup > 0 {
		for _, t := range targets {
			r, err := wrk(ctx, o.load, gen, o.warmup, t)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(w, "# warm-up %s rps=%.0f non2xx=%d errors=%d\n", t.name, r.RPS, r.Non2xx, r.Errors)
		}
	}
	runs := make(map[string][]sample, len(targets))
	for round := range o.rounds {
		for _, t := range roundOrder(targets, round) {
			r, err := measureOne(ctx, o, gen, perf, t)
			if err != nil {
				return nil, err
			}
			runs[t.name] = append(runs[t.name], r)
			fmt.Fprintln(w, r.line(t.name))
		}
	}
	return runs, nil
}

// measureOne is one wrk run, with the target's counters read around it
// and its servers' CPU time counted by perf stat during it.
func measureOne(ctx context.Context, o options, gen []string, perf bool, t *target) (sample, error) {
	var before counters
	if t.counters != nil {
		var err error
		if before, err = t.counters(ctx); err != nil {
			return sample{}, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	var cpu func() (time.Duration, error)
	if perf {
		var err error
		if cpu, err = perfStat(ctx, t.own, o.duration); err != nil {
			return sample{}, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	r, err := wrk(ctx, o.load, gen, o.duration, t)
	if err != nil {
		return sample{}, err
	}
	if cpu != nil {
		if r.CPU, err = cpu(); err != nil {
			return sample{}, fmt.Errorf("%s: %w", t.name, err)
		}
	}
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

// roundOrder is the order of one round: the targets, backwards in odd
// rounds, rotated by the round number, so no target always runs at the
// same point of a round or after the same neighbour.
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

// writeHeader writes what the run is: what stays from run to run in config
// lines ("key: value"); what changes (date, load, commit) in comments, for
// benchstat keeps results whose config differs apart.
func writeHeader(ctx context.Context, w io.Writer, o options, root string, start time.Time, pinned string) {
	fmt.Fprintf(w, "# side-by-side, %s: go run ./bench/sidebyside %s\n", start.Format(time.RFC3339), strings.Join(os.Args[1:], " "))
	fmt.Fprintf(w, "load: wrk -t%d -c%d -d%s --latency, warm-up %v\n", o.threads, o.connections, wrkDuration(o.duration), o.warmup)
	fmt.Fprintf(w, "pin: %s\n", pinned)
	fmt.Fprintf(w, "# %d rounds; load average at start: %s\n", o.rounds, loadAverage())
	if o.rounds < 3 {
		fmt.Fprintln(w, "# fewer than 3 rounds: a development run, not a result")
	}
	for _, kv := range append(machine(), versions(ctx, o.goBin, root)...) {
		fmt.Fprintf(w, "%s: %s\n", kv[0], kv[1])
	}
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
