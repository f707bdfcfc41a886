package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/ratelimit-gateway/gateway/internal/stat"
)

// The open loop: vegeta sends every open-loop target a few constant rates,
// each a fraction of the slowest one's closed-loop capacity in the same
// run, so that every target sustains every rate. What a target adds is its
// latency minus the upstream's, alone, at the same rate in the same round.

// openTargets are the targets measured open loop (with their base:
// versions when -base is given), in the table's order.
var openTargets = []string{tUpstream, tNginxLimitReq, tHAProxy, tCaddy, tBare, tGatewayLocal, tGatewayRedis, tGatewayLLM}

const (
	// openWarmup is sent at each point's rate before it is measured: it
	// opens the connections the rate needs.
	openWarmup = 500 * time.Millisecond
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
}

// openPoint is one target at one rate in one round.
type openPoint struct {
	pct      int
	round    int
	p50, p99 time.Duration // vegeta's estimates, over every response
	requests int
	non2xx   int
	errors   int     // requests without a response
	sent     float64 // the rate vegeta sent over the rate asked
}

// parsePercents reads -open-rates: "25,50,75".
func parsePercents(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 || v > 100 || slices.Contains(out, v) {
			return nil, fmt.Errorf("-open-rates: %q is not a new percentage from 1 to 100", f)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// pointDuration is how long a point at rate lasts: at least minDuration,
// long enough for samples requests, at most openMaxPoint.
func (o openOptions) pointDuration(rate int) time.Duration {
	need := time.Duration(math.Ceil(float64(o.samples)/float64(rate)*10)) * 100 * time.Millisecond
	return min(max(o.minDuration, need), openMaxPoint)
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
		out = append([]*target{{name: tUpstream, url: "http://" + l.upstream + "/"}}, out...)
	}
	return out
}

// measureOpen runs the open-loop rounds: in each, every rate lowest first,
// at each rate every target in the closed loop's rotating order, a fresh
// vegeta attacker (its own connections) a point. With keep (-keep), the
// last round's results at openGoalPct are written to keep in vegeta's
// encoding, for vegeta plot and vegeta report.
func measureOpen(ctx context.Context, w io.Writer, o options, set []*target, runs map[string][]sample, keep string) (map[string][]openPoint, error) {
	capacity := math.Inf(1)
	for _, t := range set {
		var rps []float64
		for _, r := range runs[t.name] {
			rps = append(rps, r.RPS)
		}
		if m := stat.Median(rps); len(rps) > 0 && m < capacity {
			capacity = m
		}
	}
	if math.IsInf(capacity, 1) || capacity < 1 {
		return nil, fmt.Errorf("open loop: no closed-loop rate of its targets to start from")
	}
	fmt.Fprintf(w, "# open loop: %v%% of %.0f requests/s (the slowest open-loop target's median), vegeta, at most %d connections a target\n", o.open.pcts, capacity, o.connections)
	var enc vegeta.Encoder
	if keep != "" {
		f, err := os.Create(keep)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		enc = vegeta.NewEncoder(f)
		fmt.Fprintf(w, "# plot: go run github.com/tsenart/vegeta/v12@v12.13.0 plot %s > openloop.html\n", keep)
	}
	out := map[string][]openPoint{}
	for round := range o.open.rounds {
		for _, pct := range o.open.pcts {
			rate := max(1, int(capacity*float64(pct)/100))
			for _, t := range roundOrder(set, round+pct) {
				var draw func(*vegeta.Result)
				if enc != nil && round == o.open.rounds-1 && pct == openGoalPct {
					draw = func(r *vegeta.Result) { _ = enc.Encode(r) }
				}
				pt, err := attack(ctx, o, t, rate, o.open.pointDuration(rate), draw)
				if err != nil {
					return nil, err
				}
				pt.pct, pt.round = pct, round
				out[t.name] = append(out[t.name], pt)
				fmt.Fprintf(w, "BenchmarkOpen/%s/rate=%dpct %d %.1f µs-p50 %.1f µs-p99 %d non2xx %d errors %.3f sent/asked\n",
					benchName(t.name), pct, pt.requests, usec(pt.p50), usec(pt.p99), pt.non2xx, pt.errors, pt.sent)
			}
		}
	}
	return out, nil
}

// attack is one point: a warm-up at the rate, then rate for d, with at
// most -connections keep-alive connections (a request due while all are
// busy waits for one, and the wait is in its latency).
func attack(ctx context.Context, o options, t *target, rate int, d time.Duration, draw func(*vegeta.Result)) (openPoint, error) {
	// One transport for the warm-up's attacker and the point's: an
	// attacker stops for good after one attack, the connections stay.
	tr := &http.Transport{MaxIdleConnsPerHost: o.connections, MaxConnsPerHost: o.connections}
	defer tr.CloseIdleConnections()
	attacker := func() *vegeta.Attacker {
		return vegeta.NewAttacker(vegeta.Client(&http.Client{Transport: tr}), vegeta.MaxWorkers(4096),
			vegeta.Timeout(10*time.Second), vegeta.Redirects(vegeta.NoFollow))
	}
	method := t.method
	if method == "" {
		method = http.MethodGet
	}
	tg := vegeta.NewStaticTargeter(vegeta.Target{Method: method, URL: t.url, Body: t.body, Header: t.header})
	pace := vegeta.Rate{Freq: rate, Per: time.Second}
	for range attacker().Attack(tg, pace, openWarmup, "warm-up") {
	}
	a := attacker()
	var m vegeta.Metrics
	stop := context.AfterFunc(ctx, func() { a.Stop() })
	defer stop()
	for r := range a.Attack(tg, pace, d, t.name) {
		m.Add(r)
		if draw != nil {
			draw(r)
		}
	}
	m.Close()
	if ctx.Err() != nil {
		return openPoint{}, ctx.Err()
	}
	pt := openPoint{p50: m.Latencies.P50, p99: m.Latencies.P99, requests: int(m.Requests), sent: m.Rate / float64(rate)}
	for code, n := range m.StatusCodes {
		switch {
		case code == "0":
			pt.errors += n
		case code[0] != '2':
			pt.non2xx += n
		}
	}
	return pt, nil
}

// openRatioName names the open-loop ratio of target.
func openRatioName(target string) string {
	return fmt.Sprintf("open-p99-added@%d%% %s/%s", openGoalPct, target, tNginxLimitReq)
}

// openRatios are X's p99 added over the upstream's at openGoalPct (the
// median over the rounds of each round's difference) over nginx
// limit_req's, for every open-loop proxy.
func openRatios(open map[string][]openPoint) []ratio {
	if open == nil {
		return nil
	}
	added := func(name string) (time.Duration, bool) {
		var ds []time.Duration
		for _, pt := range open[name] {
			for _, up := range open[tUpstream] {
				if pt.pct == openGoalPct && up.pct == pt.pct && up.round == pt.round {
					ds = append(ds, pt.p99-up.p99)
				}
			}
		}
		return stat.Median(ds), len(ds) > 0
	}
	ng, okN := added(tNginxLimitReq)
	var out []ratio
	for _, name := range openTargets[2:] {
		v, ok := added(name)
		out = append(out, div(openRatioName(name), float64(v), float64(ng), ok && okN))
	}
	return out
}
