package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/openloop"
)

// The open-loop measurement: every open-loop target at a few constant
// rates, each a fraction of the slowest one's closed-loop capacity in the
// same run, so that every target sustains every rate. What a target adds is
// its latency minus the upstream's, alone, at the same rate in the same
// round.

// openTargets are the targets measured open loop (with their base:
// versions when -base is given), in the table's order.
var openTargets = []string{tUpstream, tNginxLimitReq, tHAProxy, tCaddy, tBare, tGatewayLocal, tGatewayRedis, tGatewayLLM}

const (
	// openWarmup is sent at each point's rate before it is measured: it
	// opens the connections the rate needs.
	openWarmup = 500 * time.Millisecond
	// openTimeout bounds one request.
	openTimeout = 10 * time.Second
	// openMaxPoint bounds one point, whatever -open-samples asks.
	openMaxPoint = 30 * time.Second
	// openGoalPct is the rate the TARGET line compares at.
	openGoalPct = 50
)

// openOptions are the open-loop flags.
type openOptions struct {
	rounds      int           // 0: no open loop
	pcts        []int         // rates, in percent of the slowest target's capacity
	minDuration time.Duration // each point lasts at least this
	samples     int           // and long enough for this many requests
	slice       time.Duration // the turn each target of a rate takes; 0: one after the other
}

// parsePercents reads -open-rates: "25,50,75".
func parsePercents(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 || v > 100 {
			return nil, fmt.Errorf("-open-rates: %q is not a percentage from 1 to 100", f)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("-open-rates: %d%% given twice", v)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// pointDuration is how long a point at rate lasts: at least minDuration,
// long enough for samples requests and 1 % more (a point's edges may each
// lose one), in tenths of a second, at most openMaxPoint.
func (o openOptions) pointDuration(rate int) time.Duration {
	tenths := math.Ceil(float64(o.samples) * 1.01 / float64(rate) * 10)
	need := time.Duration(tenths) * 100 * time.Millisecond
	return min(max(o.minDuration, need), openMaxPoint)
}

// turns says how a rate's targets share its time.
func turns(slice time.Duration) string {
	if slice == 0 {
		return "the targets of a rate one after the other"
	}
	return fmt.Sprintf("the targets of a rate in turns of %v", slice)
}

// openKey names one point.
type openKey struct {
	target string
	pct    int
}

// openRun is the open-loop measurement's input and output.
type openRun struct {
	capacity float64 // the slowest open-loop target's median rps, closed loop
	slowest  string
	pcts     []int
	rates    map[int]int // pct → requests per second
	targets  []string    // names, in the table's order
	results  map[openKey][]openloop.Result
	duration map[int]time.Duration // pct → each point's measured duration
	// The machine's stalls just before and just after the rounds, every
	// server started and idle.
	stallsBefore, stallsAfter stalls
}

// openStallProbe is how long each probe of the machine's stalls spins.
const openStallProbe = 2 * time.Second

// stallWarnings are the WARN lines of the probes around the rounds.
func (or *openRun) stallWarnings() []string {
	var out []string
	for _, w := range []string{stallWarning("before the open loop", or.stallsBefore), stallWarning("after the open loop", or.stallsAfter)} {
		if w != "" {
			out = append(out, w)
		}
	}
	return out
}

// openSet is the open-loop targets among those started, with the upstream
// added when it was not selected for the closed loop.
func (l *lab) openSet(targets []*target) []*target {
	var out []*target
	for _, name := range openTargets {
		for _, t := range targets {
			if strings.TrimPrefix(t.name, basePrefix) == name {
				out = append(out, t)
			}
		}
	}
	if len(out) > 0 && out[0].name != tUpstream {
		out = append([]*target{{name: tUpstream, about: "the upstream alone", url: "http://" + l.upstream + "/"}}, out...)
	}
	return out
}

// slowest is the open-loop target with the lowest median closed-loop rps.
func slowest(set []*target, runs map[string][]sample) (string, float64) {
	name, low := "", math.Inf(1)
	for _, t := range set {
		rs := runs[t.name]
		if len(rs) == 0 {
			continue
		}
		if v := summarize(t, rs).rps; v < low {
			name, low = t.name, v
		}
	}
	return name, low
}

// measureOpen runs the open-loop rounds: round r measures every rate,
// lowest first, and at each rate every target once, in roundOrder.
func measureOpen(ctx context.Context, w io.Writer, o options, set []*target, runs map[string][]sample) (*openRun, error) {
	name, capacity := slowest(set, runs)
	if name == "" {
		return nil, fmt.Errorf("open loop: no closed-loop capacity measured for %v", names(set))
	}
	or := &openRun{capacity: capacity, slowest: name, pcts: o.open.pcts, rates: map[int]int{}, duration: map[int]time.Duration{},
		results: map[openKey][]openloop.Result{}}
	for _, t := range set {
		or.targets = append(or.targets, t.name)
	}
	var perRound time.Duration
	fmt.Fprintf(w, "\n## Open loop (constant rate, %d rounds; rates in %% of %s's closed-loop median, %.0f requests/s)\n\n", o.open.rounds, name, capacity)
	for _, p := range or.pcts {
		rate := max(1, int(math.Round(capacity*float64(p)/100)))
		or.rates[p] = rate
		or.duration[p] = o.open.pointDuration(rate)
		perRound += time.Duration(len(set)) * (or.duration[p] + openWarmup)
		fmt.Fprintf(w, "%3d%%  %6d requests/s for %v after a %v warm-up: about %d requests a point a round\n",
			p, rate, or.duration[p], openWarmup, int(float64(rate)*or.duration[p].Seconds()))
	}
	fmt.Fprintf(w, "about %v of load a round, %v in all\n", perRound.Round(time.Second), (perRound * time.Duration(o.open.rounds)).Round(time.Second))
	or.stallsBefore = probeStalls(runtime.NumCPU(), openStallProbe)
	fmt.Fprintf(w, "machine stalls before the rounds: %v\n\n", or.stallsBefore)
	for round := range o.open.rounds {
		for i, p := range or.pcts {
			order := roundOrder(set, round*len(or.pcts)+i)
			in := openloop.Interleaved{Slice: o.open.slice}
			for _, t := range order {
				in.Points = append(in.Points, pointConfig(o, t, or.rates[p], or.duration[p]))
			}
			rs, err := generate(ctx, o.pin.generator, in)
			if err != nil {
				return nil, fmt.Errorf("open loop at %d/s: %w", or.rates[p], err)
			}
			for j, t := range order {
				r := rs[j]
				k := openKey{t.name, p}
				or.results[k] = append(or.results[k], r)
				fmt.Fprintf(w, "open %d/%d %3d%% %6d/s  %-23s p50=%sms p99=%sms requests=%d non2xx=%d errors=%d sent=%.0f/s conns=%d\n",
					round+1, o.open.rounds, p, r.Rate, t.name, ms(r.P50), ms(r.P99), r.Requests, r.Non2xx, r.Errors, r.SentRate, r.Dials)
			}
		}
	}
	or.stallsAfter = probeStalls(runtime.NumCPU(), openStallProbe)
	fmt.Fprintf(w, "machine stalls after the rounds: %v\n", or.stallsAfter)
	return or, nil
}

// pointConfig is the generator's point for target t at rate: at most as
// many connections as wrk keeps open in the closed loop (-connections),
// kept alive and reused, so that a point opens a handful of connections,
// not one per request that found the others busy.
func pointConfig(o options, t *target, rate int, d time.Duration) openloop.Config {
	return openloop.Config{URL: t.url, Method: t.method, Body: t.body, Header: t.header,
		Rate: rate, Warmup: openWarmup, Duration: d, Timeout: openTimeout, Connections: o.connections}
}

func names(ts []*target) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.name)
	}
	return out
}

// generateFlag runs the benchmark's own binary as the load generator: one
// fresh process per rate and round, the same for every target, reading its
// openloop.Interleaved as JSON on stdin and writing one openloop.Result a
// point as JSON on stdout.
const generateFlag = "generate"

// generate runs one rate's points, in turns, in a generator process (pinned
// with prefix, e.g. taskset, when set). Cancelling ctx kills it.
func generate(ctx context.Context, prefix []string, in openloop.Interleaved) ([]openloop.Result, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	bound := 30 * time.Second
	for _, c := range in.Points {
		bound += c.Warmup + c.Duration + c.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	argv := append(slices.Clone(prefix), self, "-"+generateFlag)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(body), &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("generator: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	var rs []openloop.Result
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil {
		return nil, fmt.Errorf("generator's result: %w: %q", err, out.String())
	}
	if len(rs) != len(in.Points) {
		return nil, fmt.Errorf("generator: %d results for %d points", len(rs), len(in.Points))
	}
	return rs, nil
}

// runGenerator is the generator process: one rate's points, from stdin to
// stdout.
func runGenerator(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	var in openloop.Interleaved
	dec := json.NewDecoder(stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("reading the points: %w", err)
	}
	rs, err := openloop.RunInterleaved(ctx, in)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(rs)
}

// openSummary is one point over the rounds.
type openSummary struct {
	target    string
	pct, rate int
	rounds    int
	p50, p99  time.Duration // medians over the rounds
	// added over the upstream's medians at the same rate; ok is false when
	// the upstream was not measured there.
	p50Added, p99Added time.Duration
	addedOK            bool
	requests           int     // summed over the rounds
	minRequests        int     // in the round with the fewest
	non2xx, errors     int     // summed
	sentRatio          float64 // the lowest over the rounds of sent / asked
	firstError         string
}

// summarizeOpen reduces the rounds of each point, in rate order and then
// the targets' order. What a target adds is the median over the rounds of
// its figure minus the upstream's in the same round: a rate's targets
// share a round's machine (in turns, a generator process of their own), so
// a round the machine made slow for all of them cancels out of each
// difference rather than moving one target's median and not another's.
func summarizeOpen(or *openRun) []openSummary {
	var out []openSummary
	for _, p := range or.pcts {
		up := or.results[openKey{tUpstream, p}]
		for _, name := range or.targets {
			rs := or.results[openKey{name, p}]
			if len(rs) == 0 {
				continue
			}
			s := openSummary{target: name, pct: p, rate: or.rates[p], rounds: len(rs), sentRatio: math.Inf(1), minRequests: math.MaxInt}
			s.p50 = medianOf(rs, func(r openloop.Result) time.Duration { return r.P50 })
			s.p99 = medianOf(rs, func(r openloop.Result) time.Duration { return r.P99 })
			for _, r := range rs {
				s.requests += r.Requests
				s.minRequests = min(s.minRequests, r.Requests)
				s.non2xx += r.Non2xx
				s.errors += r.Errors
				if s.firstError == "" {
					s.firstError = r.FirstError
				}
				s.sentRatio = math.Min(s.sentRatio, r.SentRate/float64(r.Rate))
			}
			if len(up) == len(rs) {
				s.p50Added = medianAdded(rs, up, func(r openloop.Result) time.Duration { return r.P50 })
				s.p99Added = medianAdded(rs, up, func(r openloop.Result) time.Duration { return r.P99 })
				s.addedOK = true
			}
			out = append(out, s)
		}
	}
	return out
}

// medianAdded is the median over the rounds of f of rs's round minus f of
// up's same round.
func medianAdded(rs, up []openloop.Result, f func(openloop.Result) time.Duration) time.Duration {
	vs := make([]time.Duration, len(rs))
	for i := range rs {
		vs[i] = f(rs[i]) - f(up[i])
	}
	return median(vs)
}

func medianOf(rs []openloop.Result, f func(openloop.Result) time.Duration) time.Duration {
	vs := make([]time.Duration, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	return median(vs)
}

// openRatioName is the RATIO line of target's p99 added at pct over
// nginx-limit_req's.
func openRatioName(pct int, target string) string {
	return fmt.Sprintf("open-p99-added@%d%% %s/%s", pct, target, tNginxLimitReq)
}

// openRatios are, at openGoalPct, each open-loop target's p99 added over
// nginx-limit_req's; prefix picks the base: versions of the gateway's.
func openRatios(sums []openSummary, prefix string) []ratio {
	at := map[string]openSummary{}
	for _, s := range sums {
		if s.pct == openGoalPct {
			at[s.target] = s
		}
	}
	ng, okNg := at[tNginxLimitReq]
	var out []ratio
	for _, name := range openTargets {
		if name == tUpstream || name == tNginxLimitReq {
			continue
		}
		src := name
		if strings.HasPrefix(name, "gateway-") {
			src = prefix + name
		}
		s, ok := at[src]
		r := ratio{name: openRatioName(openGoalPct, name)}
		if ok && okNg && s.addedOK && ng.addedOK && ng.p99Added > 0 {
			r.value, r.ok = float64(s.p99Added)/float64(ng.p99Added), true
		}
		out = append(out, r)
	}
	return out
}

// writeOpen writes the open-loop table: one row a point.
func writeOpen(w io.Writer, or *openRun, sums []openSummary) {
	fmt.Fprintf(w, "\n## Open loop (medians of %d rounds; added = the target's minus the upstream's at the same rate; requests, non-2xx and errors summed)\n\n",
		maxRounds(sums))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\trate\trate/s\tp50 ms\tp99 ms\tp50 added\tp99 added\trequests\tfewest a round\tnon-2xx\terrors\tsent/asked\t")
	for _, s := range sums {
		added := func(d time.Duration) string {
			if !s.addedOK {
				return "n/a"
			}
			return ms(d)
		}
		fmt.Fprintf(tw, "%s\t%d%%\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.3f\t\n", s.target, s.pct, s.rate, ms(s.p50), ms(s.p99),
			added(s.p50Added), added(s.p99Added), s.requests, s.minRequests, s.non2xx, s.errors, s.sentRatio)
	}
	tw.Flush()
}

func maxRounds(sums []openSummary) int {
	n := 0
	for _, s := range sums {
		n = max(n, s.rounds)
	}
	return n
}

// openAnomalies are the open loop's WARN lines: a generator that fell
// behind its rate, failed requests, points too short for their p99, a
// nginx-limit_req that adds nothing measurable at the goal's rate, and a
// target whose p99 there is below the upstream's (noise).
func openAnomalies(sums []openSummary, samples int) []string {
	var out []string
	for _, s := range sums {
		at := fmt.Sprintf("open loop %s at %d%% (%d/s)", s.target, s.pct, s.rate)
		behind := s.sentRatio < 0.95
		if behind {
			out = append(out, fmt.Sprintf("%s: the generator sent %.0f%% of the rate in its slowest round (%d requests): that point is partly closed loop", at, 100*s.sentRatio, s.minRequests))
		}
		if s.non2xx+s.errors > 0 {
			out = append(out, fmt.Sprintf("%s: %d non-2xx and %d failed requests, the first: %s", at, s.non2xx, s.errors, s.firstError))
		}
		if s.minRequests < samples && !behind {
			out = append(out, fmt.Sprintf("%s: %d requests in a round, fewer than -open-samples %d (a point lasts at most %v)", at, s.minRequests, samples, openMaxPoint))
		}
		switch {
		case s.pct != openGoalPct || !s.addedOK:
		case s.target == tNginxLimitReq && s.p99Added <= 0:
			out = append(out, fmt.Sprintf("%s: p99 added %sms, not above the upstream's: the open-loop ratios at %d%% are n/a", at, ms(s.p99Added), openGoalPct))
		case s.target != tUpstream && s.p99Added < 0:
			out = append(out, fmt.Sprintf("%s: p99 added %sms, below the upstream's: the machine's noise is larger than what it adds, and its ratio is not a result", at, ms(s.p99Added)))
		}
	}
	return out
}
