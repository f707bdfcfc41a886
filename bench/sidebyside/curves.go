package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/internal/llmload"
	"github.com/ratelimit-gateway/gateway/bench/plot"
)

// -curves: how the gateway's cost grows with the work. Each point is
// measured as a ratio to its curve's simplest case in the same run: the
// HTTP curves as targets of the same rounds (wrk), the rest in this process
// before any server starts. See docs/scaling.md.

// policyCounts are the policies on one route of the policies curve.
var policyCounts = []int{1, 2, 4, 8}

// httpRouteCounts are the route counts of the routes curve over HTTP: the
// request matches the last route (and, at the largest, also the first).
var httpRouteCounts = []int{1, 10, 100, 1000}

// curveTarget is a target of an HTTP curve: its point on the curve.
type curveTarget struct {
	*target
	curve string
	x     float64
	label string
	// startup is from exec to accepting connections (keys curve).
	startup time.Duration
	pid     int // the gateway process, whose CPU time each run reads
}

// runCurves runs every curve, prints the report, writes it to
// <results>/curves/ and one SVG per curve beside it.
func runCurves(ctx context.Context, o options, root string) error {
	tmp, cleanup, err := workDir("curves-", o.keep)
	if err != nil {
		return err
	}
	defer cleanup()
	var report bytes.Buffer
	w := io.MultiWriter(os.Stdout, &report)
	start := time.Now()
	fmt.Fprintf(w, "# Cost curves, %s\n\n", start.Format(time.RFC3339))
	fmt.Fprintf(w, "command: %s\n", strings.Join(append([]string{"go run ./bench/sidebyside"}, os.Args[1:]...), " "))
	fmt.Fprintf(w, "load: wrk -t%d -c%d -d%s --latency; %d rounds, warm-up %v; medians over rounds; every ratio is against its curve's first point in this run\n",
		o.threads, o.connections, wrkDuration(o.duration), o.rounds, o.warmup)
	fmt.Fprintln(w, "\n## Machine")
	for _, kv := range machine() {
		fmt.Fprintf(w, "%-22s %s\n", kv[0]+":", kv[1])
	}
	fmt.Fprintln(w, "\n## Versions")
	for _, kv := range versions(ctx, o.goBin, root) {
		fmt.Fprintf(w, "%-22s %s\n", kv[0]+":", kv[1])
	}

	var c curves
	fmt.Fprintln(w, "\n## In process (before any server starts; *_ns and tokens_per_s in the thread's CPU time, *_cpu_ms in the process's, *_ms wall)")
	if err := c.inProcess(ctx, w, o, root, tmp); err != nil {
		return err
	}

	bins, err := build(ctx, o.goBin, root, tmp)
	if err != nil {
		return err
	}
	ps, err := newProcs(filepath.Join(tmp, "logs"), o.pin.servers)
	if err != nil {
		return err
	}
	defer ps.stopAll()
	l := &lab{ps: ps, dir: tmp, gateway: bins.gateway, bare: bins.bare}
	defer l.close()
	if err := l.startUpstream(ctx); err != nil {
		return err
	}
	if err := l.startRedis(ctx); err != nil {
		return err
	}
	if c.http, err = l.startCurveTargets(ctx); err != nil {
		return err
	}
	runs, err := c.measureHTTP(ctx, w, o)
	if err != nil {
		return err
	}
	c.sums = map[string]summary{}
	for _, ct := range c.http {
		c.sums[ct.name] = summarize(ct.target, runs[ct.name])
	}
	if err := l.measurePromptLoad(ctx, w, &c); err != nil {
		return err
	}
	logWarnings := ps.logWarnings()
	ps.stopAll()

	c.writeHTTP(w)
	c.writeTargets(w)
	for _, s := range append(anomalies(c.summaries()), logWarnings...) {
		fmt.Fprintf(w, "WARN %s\n", s)
	}
	fmt.Fprintf(w, "\nfinished in %v; load average at end: %s\n", time.Since(start).Round(time.Second), loadAverage())
	if o.resultsDir == "" {
		return nil
	}
	dir := o.resultsDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	path, err := saveResults(filepath.Join(dir, "curves"), start, report.Bytes())
	if err != nil {
		return err
	}
	charts, err := c.saveCharts(strings.TrimSuffix(path, ".txt"))
	if err != nil {
		return err
	}
	fmt.Printf("\nwritten to %s\n", path)
	for _, ch := range charts {
		fmt.Printf("chart: %s\n", ch)
	}
	return nil
}

// curves holds every measured point.
type curves struct {
	keys, routeMatch, clientKeys, prompts []curvePoint
	tokenizer                             map[string]float64
	libraryBench                          []string
	http                                  []curveTarget
	sums                                  map[string]summary
	// promptLoad is the admitted small call's latency, idle and with
	// large prompts being counted.
	promptLoad []curvePoint
	// cpuPerReq is each HTTP target's median over the rounds of its
	// gateway's CPU time per response; cpuRounds the rounds' own, in
	// round order.
	cpuPerReq map[string]time.Duration
	cpuRounds map[string][]time.Duration
}

// measureHTTP warms every HTTP curve target, then runs the rounds as
// measure does (the order changing from round to round), reading each
// gateway's CPU time around each run: CPU time per response is what a
// request costs the gateway whatever else the machine runs, where rps on
// a shared machine also measures the others.
func (c *curves) measureHTTP(ctx context.Context, w io.Writer, o options) (map[string][]sample, error) {
	targets := make([]*target, len(c.http))
	pid := map[string]int{}
	for i, ct := range c.http {
		targets[i], pid[ct.name] = ct.target, ct.pid
	}
	if o.warmup > 0 {
		fmt.Fprintf(w, "\n## Warm-up (%v each, not measured)\n\n", o.warmup)
		for _, t := range targets {
			if _, _, err := wrk(ctx, o.load, o.pin.generator, o.warmup, t); err != nil {
				return nil, err
			}
		}
	}
	fmt.Fprintf(w, "\n## Runs (wrk -t%d -c%d -d%s --latency, %d rounds)\n\n", o.threads, o.connections, wrkDuration(o.duration), o.rounds)
	runs := map[string][]sample{}
	cpu := map[string][]time.Duration{}
	for round := range o.rounds {
		for _, t := range roundOrder(targets, round) {
			before, err := procCPU(pid[t.name])
			if err != nil {
				return nil, err
			}
			r, _, err := wrk(ctx, o.load, o.pin.generator, o.duration, t)
			if err != nil {
				return nil, err
			}
			after, err := procCPU(pid[t.name])
			if err != nil {
				return nil, err
			}
			perReq := (after - before) / time.Duration(max(r.Requests, 1))
			runs[t.name] = append(runs[t.name], r)
			cpu[t.name] = append(cpu[t.name], perReq)
			fmt.Fprintf(w, "round %d/%d  %-22s rps=%-8.0f p99=%sms cpu/req=%.1fus non2xx=%d requests=%d errors=%d\n",
				round+1, o.rounds, t.name, r.RPS, ms(r.P99), usec(perReq), r.Non2xx, r.Requests, r.Errors)
		}
	}
	c.cpuPerReq, c.cpuRounds = map[string]time.Duration{}, cpu
	for name, ds := range cpu {
		c.cpuPerReq[name] = median(ds)
	}
	return runs, nil
}

func usec(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func (c *curves) inProcess(ctx context.Context, w io.Writer, o options, root, tmp string) error {
	var err error
	fmt.Fprintln(w, "\n### API keys in a keys file (policies.Load, Watcher.Reload after one key added, live heap, Tenants.Lookup)")
	if c.keys, err = measureKeys(tmp); err != nil {
		return fmt.Errorf("keys curve: %w", err)
	}
	writePoints(w, c.keys, "start_ms", "start_cpu_ms", "reload_ms", "reload_cpu_ms", "bytes_per_key", "lookup_ns")
	fmt.Fprintln(w, "\n### Route match (Snapshot.Match on /svc/N/items/42; prefix routes /svc/0 … /svc/<n-1>)")
	if c.routeMatch, err = measureRouteMatch(); err != nil {
		return fmt.Errorf("route curve: %w", err)
	}
	writePoints(w, c.routeMatch, "match_first_ns", "match_last_ns")
	fmt.Fprintln(w, "\n### Distinct client keys, local token bucket (Engine.Decide over held keys; live heap per key)")
	if c.clientKeys, err = measureClientKeys(); err != nil {
		return fmt.Errorf("client keys curve: %w", err)
	}
	writePoints(w, c.clientKeys, "decide_ns", "bytes_per_key")
	fmt.Fprintln(w, "\n### Prompt size, llm route (llm.ParseRequest: JSON and o200k counting, one goroutine)")
	if c.prompts, c.tokenizer, err = measurePrompts(); err != nil {
		return fmt.Errorf("prompt curve: %w", err)
	}
	writePoints(w, c.prompts, "tokens", "parse_ms", "tokens_per_s", "mb_per_s")
	for _, k := range slices.Sorted(maps.Keys(c.tokenizer)) {
		fmt.Fprintf(w, "tokenizer %-36s %.0f\n", k, c.tokenizer[k])
	}
	c.libraryBench, err = runLibraryBench(ctx, o.goBin, root)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nthe tokenizer library's own benchmark, as it ships (go test -bench 'BenchmarkLongPiece/latin' github.com/tiktoken-go/tokenizer):")
	for _, line := range c.libraryBench {
		fmt.Fprintln(w, line)
	}
	return nil
}

// runLibraryBench runs the tokenizer library's BenchmarkLongPiece (latin,
// o200k) from the module cache, as its authors wrote it.
func runLibraryBench(ctx context.Context, goBin, root string) ([]string, error) {
	out, err := goTest(ctx, goBin, root, "-run", "^$", "-bench", "BenchmarkLongPiece/latin/", "-benchtime", "100x", "github.com/tiktoken-go/tokenizer")
	if err != nil {
		return nil, fmt.Errorf("the tokenizer's own benchmark: %w", err)
	}
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "Benchmark") {
			lines = append(lines, line)
		}
	}
	return lines, nil
}

func writePoints(w io.Writer, pts []curvePoint, metrics ...string) {
	fmt.Fprintf(w, "%-16s", "point")
	for _, m := range metrics {
		fmt.Fprintf(w, " %16s", m)
	}
	for _, m := range metrics {
		fmt.Fprintf(w, " %16s", m+"/first")
	}
	fmt.Fprintln(w)
	for _, p := range pts {
		fmt.Fprintf(w, "%-16s", p.label)
		for _, m := range metrics {
			fmt.Fprintf(w, " %16s", fmtNum(p.values[m]))
		}
		for _, m := range metrics {
			fmt.Fprintf(w, " %16.3f", p.values[m]/pts[0].values[m])
		}
		fmt.Fprintln(w)
	}
}

// startCurveTargets starts one gateway per point of the HTTP curves.
func (l *lab) startCurveTargets(ctx context.Context) ([]curveTarget, error) {
	up := "http://" + l.upstream
	var out []curveTarget
	add := func(curve string, x float64, label, name, cfg, path, script string) error {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		listen := addr(ports[0])
		dir := filepath.Join(l.dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cfgPath := filepath.Join(dir, "gateway.yaml")
		if cfg == "" { // the keys curve writes its own
			if cfgPath, err = writeKeysConfig(dir, int(x), listen, up); err != nil {
				return err
			}
		} else if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(cfg, listen)), 0o644); err != nil {
			return err
		}
		began := time.Now()
		p, err := l.ps.start(name, dir, nil, l.gateway, "serve", "-config", cfgPath)
		if err != nil {
			return err
		}
		if err := p.waitTCP(ctx, listen); err != nil {
			return err
		}
		ct := curveTarget{target: &target{name: name, url: "http://" + listen + path, script: script}, curve: curve, x: x, label: label,
			startup: time.Since(began), pid: p.cmd.Process.Pid}
		out = append(out, ct)
		return nil
	}
	for _, backend := range []string{"local", "redis"} {
		for _, n := range policyCounts {
			name := fmt.Sprintf("policies-%s-%d", backend, n)
			if err := add("policies-"+backend, float64(n), fmt.Sprint(n), name, policiesConfig(name, n, backend, up, l.redis), "/", ""); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range httpRouteCounts {
		name := fmt.Sprintf("routes-%d", n)
		cfg := strings.ReplaceAll(routesConfig(n, "LISTEN", up), "%", "%%")
		cfg = strings.Replace(cfg, `"LISTEN"`, "%q", 1)
		if err := add("routes", float64(n), fmt.Sprintf("%d, last", n), name, cfg, fmt.Sprintf("/svc/%d/items/42", n-1), ""); err != nil {
			return nil, err
		}
	}
	// The first of the largest table, on the same process as its last.
	last := out[len(out)-1]
	first := *last.target
	first.name, first.url = "routes-1000-first", strings.Replace(last.url, "/svc/999/", "/svc/0/", 1)
	out = append(out, curveTarget{target: &first, curve: "routes-first", x: last.x, label: "1000, first", pid: last.pid})
	for _, n := range keysCounts {
		name := fmt.Sprintf("apikeys-%d", n)
		script := filepath.Join(l.dir, name+".lua")
		if err := os.WriteFile(script, []byte(fmt.Sprintf("wrk.headers[\"X-API-Key\"] = %q\n", apiKey(n/2))), 0o644); err != nil {
			return nil, err
		}
		if err := add("apikeys", float64(n), fmt.Sprint(n), name, "", "/", script); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// policiesConfig is a route with n policies, each its own bucket per IP;
// %%q is left for the listen address.
func policiesConfig(name string, n int, backend, upstream, redis string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %d %s policies on one route\nserver: {listen: %%q}\nadmin: {listen: \"\"}\n", name, n, backend)
	algo := "token_bucket"
	if backend == "redis" {
		algo = "gcra"
		fmt.Fprintf(&b, "redis: {addrs: [%q]}\n", redis)
	}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("%s-p%d", name, i))
	}
	fmt.Fprintf(&b, "routes:\n  - {name: bench, match: {path_prefix: /}, upstream: %q, policies: [%s]}\npolicies:\n", upstream, strings.Join(names, ", "))
	for _, pn := range names {
		fmt.Fprintf(&b, "  %s: {key: ip, algorithm: %s, rate: 10000000, per: 1s}\n", pn, algo)
	}
	return b.String()
}

// promptLoadFlooders are the large prompts kept in flight, keyed, so that
// each is read and counted.
var promptLoadFlooders = []int{0, 1, 2}

// promptLoadPhase bounds one point of the prompt load: the small calls it
// makes in that time are its samples.
const promptLoadPhase = 20 * time.Second

// promptLoadCalls are the small calls of one point of the prompt load: its
// p99 is then the 20th slowest, not one of a handful.
const promptLoadCalls = 2000

// measurePromptLoad times an admitted small llm call one at a time, idle
// and while flooders keep 1 MiB prompts of a known key in flight (each
// counted, then admitted and forwarded): what counting a large prompt
// costs the small calls beside it.
func (l *lab) measurePromptLoad(ctx context.Context, w io.Writer, c *curves) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	listen := addr(ports[0])
	path := filepath.Join(l.dir, "gateway-prompts.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(llmload.Config, listen, "http://"+l.upstream)), 0o644); err != nil {
		return err
	}
	p, err := l.ps.start("gateway-prompts", l.dir, nil, l.gateway, "serve", "-config", path)
	if err != nil {
		return err
	}
	if err := p.waitTCP(ctx, listen); err != nil {
		return err
	}
	url := "http://" + listen + "/v1/chat/completions"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 60 * time.Second}
	defer client.CloseIdleConnections()
	// Just under 1 MiB with its JSON: the upstream nginx refuses a body
	// over its client_max_body_size of 1m.
	big := promptBody(llmload.Text(1<<20 - 256))
	fmt.Fprintf(w, "\n## Admitted small llm call while 1 MiB prompts of a known key are counted (up to %d calls one at a time, at most %v, per point)\n\n", promptLoadCalls, promptLoadPhase)
	for _, n := range promptLoadFlooders {
		stop := flood(ctx, client, url, big, llmload.Key, n, http.StatusOK)
		// Small calls one at a time for the phase's time (at most
		// promptLoadCalls), so that a phase where they wait long still ends.
		var lat []time.Duration
		phase, done := context.WithTimeout(ctx, promptLoadPhase)
		for len(lat) < promptLoadCalls {
			d, err := llmload.SmallCall(phase, client, url)
			if err != nil {
				if phase.Err() != nil && ctx.Err() == nil {
					break // the phase is over, not the run
				}
				done()
				stop()
				return fmt.Errorf("prompt load: %w", err)
			}
			lat = append(lat, d)
		}
		done()
		counted, other := stop()
		c.promptLoad = append(c.promptLoad, curvePoint{x: float64(n), label: fmt.Sprint(n), values: map[string]float64{
			"p50_ms": ms64(p50(lat)), "p99_ms": ms64(p99(lat)), "calls": float64(len(lat)), "large_done": float64(counted)}})
		fmt.Fprintf(w, "large prompts in flight %d: %d small calls p50=%sms p99=%sms; large prompts answered 200: %d (other answers %d)\n",
			n, len(lat), ms(p50(lat)), ms(p99(lat)), counted, other)
	}
	return nil
}

func (c *curves) summaries() []summary {
	var out []summary
	for _, ct := range c.http {
		out = append(out, c.sums[ct.name])
	}
	return out
}

// curveRatio is rps (or p99) of a point over the first point of curve.
func (c *curves) curveRatio(ct curveTarget, base string) (rps, p99 float64) {
	b := c.sums[base]
	s := c.sums[ct.name]
	return s.rps / b.rps, float64(s.p99) / float64(b.p99)
}

// cpuRatio is a target's CPU time per response over base's.
//
// It is the median over the rounds of the two targets' ratio in each
// round, not the ratio of their medians: a round measures both within
// seconds, while the machine's speed drifts from round to round (other
// work, the clock), and a point's median and its first point's median may
// come from rounds far apart.
func (c *curves) cpuRatio(name, base string) float64 {
	a, b := c.cpuRounds[name], c.cpuRounds[base]
	if len(a) == 0 || len(a) != len(b) {
		return float64(c.cpuPerReq[name]) / float64(c.cpuPerReq[base])
	}
	ratios := make([]float64, len(a))
	for i := range a {
		ratios[i] = float64(a[i]) / float64(max(b[i], 1))
	}
	return median(ratios)
}

// base is the first point's target of a curve.
func (c *curves) base(curve string) string {
	if curve == "routes-first" {
		curve = "routes"
	}
	for _, ct := range c.http {
		if ct.curve == curve {
			return ct.name
		}
	}
	return ""
}

func (c *curves) writeHTTP(w io.Writer) {
	fmt.Fprintf(w, "\n## HTTP curves (medians of the rounds; ratios to the curve's first point; cpu/req/first is the median of the rounds' own ratios)\n\n")
	fmt.Fprintf(w, "%-22s %-12s %10s %10s %10s %12s %10s %10s %13s %10s\n", "target", "point", "rps", "p50 ms", "p99 ms", "cpu us/req", "rps/first", "p99/first", "cpu/req/first", "start ms")
	for _, ct := range c.http {
		s := c.sums[ct.name]
		r, p := c.curveRatio(ct, c.base(ct.curve))
		start := "-"
		if ct.startup > 0 {
			start = fmt.Sprintf("%.0f", ms64(ct.startup))
		}
		fmt.Fprintf(w, "%-22s %-12s %10.0f %10s %10s %12.1f %10.3f %10.3f %13.3f %10s\n", ct.name, ct.label, s.rps, ms(s.p50), ms(s.p99),
			usec(c.cpuPerReq[ct.name]), r, p, c.cpuRatio(ct.name, c.base(ct.curve)), start)
	}
	fmt.Fprintln(w, "\nrps by round:")
	writeRounds(w, c.summaries())
}

// find returns the point of pts labelled label.
func find(pts []curvePoint, label string) curvePoint {
	for _, p := range pts {
		if p.label == label {
			return p
		}
	}
	return curvePoint{values: map[string]float64{}}
}

func (c *curves) writeTargets(w io.Writer) {
	values := map[string]ratio{}
	set := func(name string, v float64) {
		ok := !math.IsNaN(v) && !math.IsInf(v, 0)
		values[name] = ratio{name: name, value: v, ok: ok}
	}
	fmt.Fprintln(w)
	for _, backend := range []string{"local", "redis"} {
		one, eight := "policies-"+backend+"-1", "policies-"+backend+"-8"
		// Each of the 7 policies beyond the first adds (cpu8/cpu1 - 1)/7
		// of a one-policy request's CPU time.
		extra := (c.cpuRatio(eight, one) - 1) / 7
		fmt.Fprintf(w, "RATIO %s/%s rps %.3f, cpu/req %.3f\n", eight, one, c.sums[eight].rps/c.sums[one].rps, c.cpuRatio(eight, one))
		fmt.Fprintf(w, "RATIO %s-extra-policy-cost %.4f (of a request's CPU time, from 1 to 8 policies)\n", backend, extra)
		set(backend+"-extra-policy-cost", extra)
	}
	last, first := c.sums["routes-1000"], c.sums["routes-1000-first"]
	fmt.Fprintf(w, "RATIO route-1000-last/first-http %.3f (HTTP rps, last over first)\n", last.rps/first.rps)
	fmt.Fprintf(w, "RATIO routes-1000/routes-1 %.3f\n", last.rps/c.sums["routes-1"].rps)
	// The target is read in process, in CPU time: a match costs well under
	// a microsecond, which HTTP rps on a shared machine cannot resolve.
	m := find(c.routeMatch, "1000")
	set("route-1000-last/first", m.values["match_first_ns"]/m.values["match_last_ns"])
	fmt.Fprintf(w, "RATIO route-1000-last/first %.3f (in process: matches a second on the last over on the first)\n", m.values["match_first_ns"]/m.values["match_last_ns"])
	k := find(c.keys, "100000")
	fmt.Fprintf(w, "RATIO apikeys-100000-start-cpu-ms %.0f, reload-cpu-ms %.0f (CPU time of the process; the TARGETs below are wall time)\n", k.values["start_cpu_ms"], k.values["reload_cpu_ms"])
	k100, k100k := c.sums["apikeys-100"], c.sums["apikeys-100000"]
	// Flat is a request with 100,000 keys costing what one with 100 does.
	set("apikeys-100-cpu/apikeys-100000-cpu", c.cpuRatio("apikeys-100", "apikeys-100000"))
	fmt.Fprintf(w, "RATIO apikeys-100000/apikeys-100 rps %.3f, cpu/req %.3f\n", k100k.rps/k100.rps, c.cpuRatio("apikeys-100000", "apikeys-100"))
	fmt.Fprintf(w, "RATIO route-1000-last/first-cpu %.3f (CPU per request, first over last)\n", c.cpuRatio("routes-1000-first", "routes-1000"))
	kp := find(c.keys, "100000")
	set("apikeys-100000-start-ms", kp.values["start_ms"])
	set("apikeys-100000-reload-ms", kp.values["reload_ms"])
	set("apikeys-bytes-per-key", kp.values["bytes_per_key"])
	if len(c.promptLoad) > 1 {
		idle := c.promptLoad[0].values["p99_ms"]
		for _, p := range c.promptLoad[1:] {
			fmt.Fprintf(w, "RATIO small-call-p99 with %s large prompts/idle %.2f\n", p.label, p.values["p99_ms"]/idle)
		}
		set("small-call-p99-large-load/idle", find(c.promptLoad, "2").values["p99_ms"]/idle)
	}
	mb := find(c.prompts, "1 MiB")
	fmt.Fprintf(w, "RATIO tokens-per-second-per-core-1MiB %.0f (beside: Count alone on the same text %.0f; the library's BenchmarkLongPiece above)\n",
		mb.values["tokens_per_s"], c.tokenizer["count-1MiB-text_tokens_per_s"])
	fmt.Fprintln(w)
	checkGoalsOf(w, curveGoals, values)
}

// curveGoals are the curves' TARGET lines.
var curveGoals = []goal{
	{"local-extra-policy-cost", false, 0.02},
	{"route-1000-last/first", true, 0.95},
	{"apikeys-100-cpu/apikeys-100000-cpu", true, 0.95},
	{"apikeys-100000-start-ms", false, 1000},
	{"apikeys-100000-reload-ms", false, 1000},
	{"apikeys-bytes-per-key", false, 200},
	{"small-call-p99-large-load/idle", false, 2.0},
}

// saveCharts writes one SVG per curve, named base-<curve>.svg.
func (c *curves) saveCharts(base string) ([]string, error) {
	httpSeries := func(curve, name string, p99 bool) plot.Series {
		s := plot.Series{Name: name}
		for _, ct := range c.http {
			if ct.curve != curve {
				continue
			}
			r, p := c.curveRatio(ct, c.base(curve))
			if p99 {
				r = p
			}
			s.X, s.Y = append(s.X, ct.x), append(s.Y, r)
		}
		return s
	}
	cpuSeries := func(curve, name string) plot.Series {
		s := plot.Series{Name: name}
		for _, ct := range c.http {
			if ct.curve == curve {
				s.X, s.Y = append(s.X, ct.x), append(s.Y, c.cpuRatio(ct.name, c.base(curve)))
			}
		}
		return s
	}
	inproc := func(pts []curvePoint, metric, name string) plot.Series {
		s := plot.Series{Name: name}
		for _, p := range pts {
			if p.values["evicting"] != 0 {
				continue
			}
			s.X, s.Y = append(s.X, p.x), append(s.Y, p.values[metric]/pts[0].values[metric])
		}
		return s
	}
	charts := map[string][]plot.Chart{
		"policies": {plot.Line{Title: "policies on a route", XLabel: "policies", YLabel: "relative to 1 policy",
			Series: []plot.Series{cpuSeries("policies-local", "CPU per request, local"), cpuSeries("policies-redis", "CPU per request, Redis"),
				httpSeries("policies-local", "rps, local", false), httpSeries("policies-redis", "rps, Redis", false),
				httpSeries("policies-local", "p99, local", true), httpSeries("policies-redis", "p99, Redis", true)}}},
		"routes": {plot.Line{Title: "routes in the config, match on the last", XLabel: "routes", YLabel: "relative to the first point", LogX: true,
			Series: []plot.Series{cpuSeries("routes", "CPU per request (vs 1 route)"), httpSeries("routes", "rps (HTTP, vs 1 route)", false), httpSeries("routes", "p99 (HTTP, vs 1 route)", true),
				inproc(c.routeMatch, "match_last_ns", "Match ns, last (vs 10 routes)")}}},
		"apikeys": {plot.Line{Title: "API keys in the keys file", XLabel: "keys", YLabel: "relative to 100 keys", LogX: true,
			Series: []plot.Series{cpuSeries("apikeys", "CPU per request"), httpSeries("apikeys", "rps (HTTP)", false), httpSeries("apikeys", "p99 (HTTP)", true),
				inproc(c.keys, "lookup_ns", "Lookup ns"), inproc(c.keys, "bytes_per_key", "bytes per key")}},
			plot.Line{Title: "API keys: start and reload", XLabel: "keys", YLabel: "ms", LogX: true,
				Series: []plot.Series{absSeries(c.keys, "start_ms", "start (Load)"), absSeries(c.keys, "reload_ms", "reload")}}},
		"clientkeys": {plot.Line{Title: "distinct client keys, local buckets", XLabel: "keys held", YLabel: "relative to 1 key", LogX: true,
			Series: []plot.Series{inproc(c.clientKeys, "decide_ns", "ns per decision")}},
			plot.Line{Title: "bytes per held key", XLabel: "keys held", YLabel: "bytes", LogX: true,
				Series: []plot.Series{absSeries(c.clientKeys, "bytes_per_key", "live heap / keys")}}},
		"prompts": {plot.Line{Title: "prompt size, llm route", XLabel: "prompt bytes", YLabel: "tokens counted per second, one core", LogX: true,
			Series: []plot.Series{absSeries(c.prompts, "tokens_per_s", "ParseRequest (JSON + o200k)")}},
			plot.Line{Title: "admitted small call while 1 MiB prompts are counted", XLabel: "large prompts in flight", YLabel: "relative to idle",
				Series: []plot.Series{inproc(c.promptLoad, "p99_ms", "p99"), inproc(c.promptLoad, "p50_ms", "p50")}}},
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(charts)) {
		path := base + "-" + name + ".svg"
		if err := plot.SaveSVG(path, charts[name]...); err != nil {
			return nil, err
		}
		out = append(out, path)
	}
	return out, nil
}

// absSeries is a metric of pts as measured (not as a ratio).
func absSeries(pts []curvePoint, metric, name string) plot.Series {
	s := plot.Series{Name: name}
	for _, p := range pts {
		if p.values["evicting"] != 0 {
			continue
		}
		s.X, s.Y = append(s.X, p.x), append(s.Y, p.values[metric])
	}
	return s
}
