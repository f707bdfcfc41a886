package main

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/stat"
)

// ratio is one RATIO line; ok is false when a target it needs was not
// measured (or a denominator is zero).
type ratio struct {
	name  string
	value float64
	ok    bool
}

// goal is one TARGET line: a ratio (or metric) against a threshold.
type goal struct {
	name      string
	atLeast   bool // >= threshold, else <=
	threshold float64
}

// goals are the performance targets: ratios against the anchors of the
// same run, which hold on any machine where absolute figures do not.
var goals = []goal{
	{tGatewayLocal + "/" + tGatewayNone, true, 0.97},
	{tGatewayLocal + "/" + tBare, true, 1.0},
	{tGatewayLocal + "/" + tCaddy, true, 1.6},
	{tGatewayLocal + "/" + tNginxLimitReq, true, 0.45},
	{tGatewayRedis + "/" + tGatewayLocal, true, 0.92},
	{tGatewayDeny + "/" + tNginxDeny, true, 0.8},
	{tGatewayDeny + "/" + tBareDeny, true, 0.95},
	// A small chat call, its token policy never binding, against a GET
	// through a route without policies.
	{tGatewayLLM + "/" + tGatewayNone, true, 0.90},
	{tGatewayTraced + "/" + tGatewayLocal, true, 0.95},
	{"redis-calls-per-denied", false, 0.1},
	{"redis-usec-per-decision " + tGatewayCluster + "/" + tGatewayUsers, false, 1.2},
	// Three masters hold about three times what one server does, at about
	// the same CPU a decision, once Redis is what runs out.
	{capacityRatioName, true, 2.7},
	{capacityCPUName, false, 1.2},
	{"p99-added/nginx-p99-added", false, 1.25},
	{openRatioName(tGatewayLocal), false, 2.0},
	{"local-bytes-per-key", false, 256},
	{"local-bytes-per-cap-key", false, 256},
}

// informational are the RATIO lines without a target: what a part of the
// gateway costs, next to the same without it.
var informational = [][2]string{
	{tGatewayLocal, tHAProxy}, {tGatewayDenyRed, tNginxDeny}, {tBareDeny, tNginxDeny},
	{tGatewayNone, tBare}, {tGatewayIETF, tGatewayNone}, {tGatewayIETF, tBare}, {tGatewayNoHdr, tGatewayNone},
	{tGatewayLocal, tGatewayStd}, {tGatewayStd, tBare}, {tGatewayLocal, tGatewayStdSrv},
	{tGatewayDeny, tGatewayDenyStd}, {tNginxLimitReq, tNginxProxy},
	{tGatewayLLM, tGatewayNonePost}, {tGatewayNonePost, tGatewayNone},
	{tGatewayCluster, tGatewayUsers}, {tGatewayTraceAll, tGatewayLocal},
	{tGatewayPolicies8, tGatewayLocal}, {tGatewayRoutes1000, tGatewayLocal},
	{tGatewayJWT, tGatewayAPIKey}, {tGatewayAPIKey, tGatewayLocal},
}

// ratios computes the RATIO lines of the closed loop from each target's
// runs: ratios of medians, and Redis counters summed over the rounds.
func ratios(runs map[string][]sample) []ratio {
	med := func(name string, f func(sample) float64) (float64, bool) { return median(runs, name, f) }
	rps := func(a, b string) ratio {
		va, okA := med(a, func(r sample) float64 { return r.RPS })
		vb, okB := med(b, func(r sample) float64 { return r.RPS })
		return div(a+"/"+b, va, vb, okA && okB)
	}
	sum := func(name string, f func(sample) float64) (float64, bool) {
		var v float64
		for _, r := range runs[name] {
			if r.Delta == nil {
				return 0, false
			}
			v += f(r)
		}
		return v, len(runs[name]) > 0
	}
	p99 := func(r sample) float64 { return float64(r.P99) }
	var out []ratio
	for _, g := range goals {
		if a, b, ok := cutPair(g.name); ok {
			out = append(out, rps(a, b))
		}
	}
	for _, p := range informational {
		out = append(out, rps(p[0], p[1]))
	}
	out = append(out, tlsRatios(runs)...)
	out = append(out, leanRatios(runs)...)
	trips, okT := sum(tGatewayDenyRed, func(r sample) float64 { return r.Delta.RoundTrips })
	denied, _ := sum(tGatewayDenyRed, func(r sample) float64 { return float64(r.Non2xx) })
	out = append(out, div("redis-calls-per-denied", trips, denied, okT))
	up, okU := med(tUpstream, p99)
	gw, okG := med(tGatewayLocal, p99)
	ng, okN := med(tNginxLimitReq, p99)
	out = append(out, div("p99-added/nginx-p99-added", gw-up, ng-up, okU && okG && okN))
	perDecision := func(name string) (float64, bool) {
		us, ok := sum(name, func(r sample) float64 { return float64(r.Delta.ScriptUsec) })
		admitted, _ := sum(name, func(r sample) float64 { return float64(r.Requests - r.Non2xx) })
		return us / admitted, ok && admitted > 0
	}
	c, okC := perDecision(tGatewayCluster)
	u, okU2 := perDecision(tGatewayUsers)
	out = append(out, div("redis-usec-per-decision "+tGatewayCluster+"/"+tGatewayUsers, c, u, okC && okU2))
	cmds, okCmd := sum(tGatewayRedis, func(r sample) float64 { return float64(r.Delta.commands()) })
	admitted, _ := sum(tGatewayRedis, func(r sample) float64 { return float64(r.Requests - r.Non2xx) })
	return append(out, div("redis-commands-per-admitted", cmds, admitted, okCmd))
}

// median is the median of f over name's runs; ok is false when name was
// not measured.
func median(runs map[string][]sample, name string, f func(sample) float64) (v float64, ok bool) {
	var xs []float64
	for _, r := range runs[name] {
		xs = append(xs, f(r))
	}
	return stat.Median(xs), len(xs) > 0
}

// cutPair splits "a/b" where both are target names.
func cutPair(name string) (a, b string, ok bool) {
	for _, s := range specs {
		if len(name) > len(s.name) && name[:len(s.name)+1] == s.name+"/" {
			b := name[len(s.name)+1:]
			for _, t := range specs {
				if t.name == b {
					return s.name, b, true
				}
			}
		}
	}
	return "", "", false
}

func div(name string, num, den float64, ok bool) ratio {
	if !ok || den <= 0 {
		return ratio{name: name}
	}
	return ratio{name: name, value: num / den, ok: true}
}

// writeRatios writes the RATIO lines, then one TARGET line per goal; a
// value that was not measured is a MISS.
func writeRatios(w io.Writer, runs map[string][]sample, open map[string][]openPoint, values map[string]ratio) {
	all := append(ratios(runs), openRatios(open)...)
	for _, r := range all {
		fmt.Fprintf(w, "RATIO %s %s\n", r.name, fmtRatio(r))
		values[r.name] = r
	}
	fmt.Fprintln(w)
	for _, g := range goals {
		r := values[g.name]
		op, pass := "<=", r.ok && r.value <= g.threshold
		if g.atLeast {
			op, pass = ">=", r.ok && r.value >= g.threshold
		}
		verdict := "MISS"
		if pass {
			verdict = "PASS"
		}
		fmt.Fprintf(w, "TARGET %s %s %s %s %s\n", g.name, fmtRatio(r), op, strconv.FormatFloat(g.threshold, 'g', -1, 64), verdict)
	}
}

func fmtRatio(r ratio) string {
	switch {
	case !r.ok:
		return "n/a"
	case math.Abs(r.value) < 0.1:
		return fmt.Sprintf("%.6f", r.value)
	case math.Abs(r.value) >= 100:
		return fmt.Sprintf("%.1f", r.value)
	}
	return fmt.Sprintf("%.3f", r.value)
}

// anomalies are what makes a run's figures doubtful: non-2xx where every
// request should pass, a deny flood that admitted more than about one
// request a minute, socket errors.
func anomalies(targets []*target, runs map[string][]sample) []string {
	var out []string
	for _, t := range targets {
		var non2xx, errs, requests, overloaded float64
		for _, r := range runs[t.name] {
			non2xx, errs, requests = non2xx+float64(r.Non2xx), errs+float64(r.Errors), requests+float64(r.Requests)
			if r.Delta != nil {
				overloaded += r.Delta.Overloaded
			}
		}
		if admitted := requests - non2xx; t.deny && admitted > float64(len(runs[t.name])) {
			out = append(out, fmt.Sprintf("%s: a deny flood admitted %.0f requests", t.name, admitted))
		}
		if !t.deny && non2xx > 0 {
			out = append(out, fmt.Sprintf("%s: %.0f non-2xx responses (%.0f answered as Redis overloaded)", t.name, non2xx, overloaded))
		}
		if errs > 0 {
			out = append(out, fmt.Sprintf("%s: %.0f socket errors", t.name, errs))
		}
	}
	return out
}
