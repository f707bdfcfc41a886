package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// summary is one target over the measured rounds: medians of rate and
// latencies, sums of counts.
type summary struct {
	name               string
	rounds             int
	rps                float64
	p50, p99           time.Duration
	requests, non2xx   int64
	errors             int64
	delta              counters // summed; zero unless counted
	counted            bool
	deny               bool
	rpsByRound         []float64       // in round order
	p99ByRound         []time.Duration // in round order
	non2xxRuns, errRun int             // runs with non-2xx / socket errors
	// cpu is the CPU time a request of each part (medians of the
	// rounds'): the target's servers, the upstream, wrk.
	cpu runCPU
	// perUpstream is what a request costs the target itself (its servers
	// and its Redis) in units of what it costs the upstream in the same
	// run: the median of the rounds', zero unless every round's upstream
	// used CPU time (see ratios' ownCPU).
	perUpstream float64
}

func summarize(t *target, runs []sample) summary {
	s := summary{name: t.name, rounds: len(runs), deny: t.deny}
	var rps, perUp []float64
	var p50, p99, own, up, gen []time.Duration
	for _, r := range runs {
		if server := r.CPU.own + r.redisCPU(); r.CPU.upstream > 0 && server > 0 {
			perUp = append(perUp, float64(server)/float64(r.CPU.upstream))
		}
		own = append(own, perRequest(r.CPU.own, r.Requests))
		up = append(up, perRequest(r.CPU.upstream, r.Requests))
		gen = append(gen, perRequest(r.CPU.generator, r.Requests))
		rps = append(rps, r.RPS)
		p50 = append(p50, r.P50)
		p99 = append(p99, r.P99)
		s.requests += r.Requests
		s.non2xx += r.Non2xx
		s.errors += r.Errors
		if r.Non2xx > 0 {
			s.non2xxRuns++
		}
		if r.Errors > 0 {
			s.errRun++
		}
		if r.Delta != nil {
			s.delta.add(*r.Delta)
			s.counted = true
		}
	}
	s.rpsByRound, s.p99ByRound = rps, p99
	s.rps = median(rps)
	s.p50 = median(p50)
	s.p99 = median(p99)
	s.cpu = runCPU{own: median(own), upstream: median(up), generator: median(gen)}
	if len(perUp) == len(runs) {
		s.perUpstream = median(perUp)
	}
	return s
}

// redisCPU is the CPU time a request of the target's Redis servers,
// summed over the rounds (zero when not counted).
func (s summary) redisCPU() time.Duration {
	if !s.counted || s.requests == 0 {
		return 0
	}
	return time.Duration(s.delta.CPU * float64(time.Second) / float64(s.requests))
}

// serverCPU is what a request costs the target itself: its servers and
// its Redis.
func (s summary) serverCPU() time.Duration { return s.cpu.own + s.redisCPU() }

// median of xs (the mean of the middle two for an even count); zero for none.
func median[T float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratio is one RATIO line; ok is false when a target it needs was not
// measured (or a denominator is zero).
type ratio struct {
	name  string
	value float64
	ok    bool
}

// ratios computes the RATIO lines from the summaries, by name.
func ratios(by map[string]summary) []ratio {
	rps := func(a, b string) ratio {
		name := a + "/" + b
		sa, okA := by[a]
		sb, okB := by[b]
		if !okA || !okB || sb.rps == 0 {
			return ratio{name: name}
		}
		return ratio{name: name, value: sa.rps / sb.rps, ok: true}
	}
	// ownCPU is a/b by what a request costs each target itself (its
	// servers and Redis), counted in what it costs the upstream in the
	// same round: what a/b's rps ratio would be where each target alone
	// ran out of cores. A machine that runs slower for a while (its other
	// tenants) slows the upstream with the target, so the unit takes that
	// out, where CPU time alone moves with it.
	ownCPU := func(a, b string) ratio {
		name := "own-cpu " + a + "/" + b
		sa, okA := by[a]
		sb, okB := by[b]
		if !okA || !okB || sa.perUpstream <= 0 || sb.perUpstream <= 0 {
			return ratio{name: name}
		}
		return ratio{name: name, value: sb.perUpstream / sa.perUpstream, ok: true}
	}
	per := func(name string, num, den float64, ok bool) ratio {
		if !ok || den <= 0 {
			return ratio{name: name}
		}
		return ratio{name: name, value: num / den, ok: true}
	}
	out := []ratio{
		rps(tGatewayLocal, tBare),
		rps(tGatewayLocal, tGatewayNone),
		rps(tGatewayLocal, tCaddy),
		rps(tGatewayLocal, tNginxLimitReq),
		rps(tGatewayLocal, tHAProxy),
		rps(tGatewayRedis, tGatewayLocal),
		rps(tGatewayDeny, tNginxDeny),
		rps(tGatewayDenyRed, tNginxDeny),
		rps(tGatewayDeny, tBareDeny),
		rps(tBareDeny, tNginxDeny),
	}
	deny, okDeny := by[tGatewayDenyRed]
	out = append(out, per("redis-calls-per-denied", deny.delta.RoundTrips, float64(deny.non2xx), okDeny && deny.counted))

	up, okUp := by[tUpstream]
	gw, okGw := by[tGatewayLocal]
	ng, okNg := by[tNginxLimitReq]
	out = append(out, per("p99-added/nginx-p99-added",
		float64(gw.p99-up.p99), float64(ng.p99-up.p99), okUp && okGw && okNg))

	allow, okAllow := by[tGatewayRedis]
	admitted := float64(allow.requests - allow.non2xx)
	out = append(out,
		per("redis-commands-per-admitted", float64(allow.delta.commands()), admitted, okAllow && allow.counted),
		// Informational: the same two from the other counter.
		per("redis-round-trips-per-admitted", allow.delta.RoundTrips, admitted, okAllow && allow.counted),
		per("redis-commands-per-denied", float64(deny.delta.commands()), float64(deny.non2xx), okDeny && deny.counted),
		rps(tGatewayNone, tBare),
		rps(tGatewayIETF, tGatewayNone),
		rps(tGatewayIETF, tBare),
		rps(tGatewayNoHdr, tGatewayNone),
		rps(tGatewayLocal, tGatewayStd),
		rps(tGatewayStd, tBare),
		rps(tGatewayLocal, tGatewayStdSrv),
		rps(tGatewayDeny, tGatewayDenyStd),
		rps(tNginxLimitReq, tNginxProxy),
		rps(tGatewayLLM, tGatewayNone),
		// Informational: what the llm route's own work costs, the POST and
		// the completion's bytes in both.
		rps(tGatewayLLM, tGatewayNonePost),
		rps(tGatewayNonePost, tGatewayNone),
		rps(tGatewayCluster, tGatewayUsers),
		usecRatio(by, tGatewayCluster, tGatewayUsers),
		cpuRatio(by, tGatewayCluster, tGatewayUsers),
		rps(tGatewayTraced, tGatewayLocal),
		rps(tGatewayTraceAll, tGatewayLocal),
	)
	for _, pair := range cpuPairs {
		out = append(out, ownCPU(pair[0], pair[1]))
	}
	return out
}

// cpuPairs are the rps ratios of the targets also given by their own CPU
// time (see ratios' ownCPU): pairs whose requests cost the upstream the
// same. A POST's body and answer cost it more than a GET's, a traced
// request's traceparent more than none, another proxy's requests and
// connections differ (the upstream spent 10–11 µs a request of the
// gateway's in one run, 15 of bare-httputil's, 23 of Caddy's), and a deny
// target sends it nothing.
var cpuPairs = [][2]string{
	{tGatewayLocal, tGatewayNone},
	{tGatewayNoHdr, tGatewayNone},
	{tGatewayIETF, tGatewayNone},
	{tGatewayRedis, tGatewayLocal},
	{tGatewayLLM, tGatewayNonePost},
}

// goal is one TARGET line: a ratio (or metric) against a threshold.
type goal struct {
	name      string
	atLeast   bool // >= threshold, else <=
	threshold float64
}

// goals are the performance targets, checked by the benchmark.
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
	{openRatioName(openGoalPct, tGatewayLocal), false, 2.0},
	{"local-bytes-per-key", false, 256},
	{"local-bytes-per-cap-key", false, 256},
}

// checkGoals writes one TARGET line per goal; a value that was not measured
// is a MISS.
func checkGoals(w io.Writer, values map[string]ratio) { checkGoalsOf(w, goals, values) }

// checkGoalsOf is checkGoals for a list of goals of its own.
func checkGoalsOf(w io.Writer, list []goal, values map[string]ratio) {
	for _, g := range list {
		r := values[g.name]
		op := "<="
		if g.atLeast {
			op = ">="
		}
		pass := r.ok && ((g.atLeast && r.value >= g.threshold) || (!g.atLeast && r.value <= g.threshold))
		verdict := "MISS"
		if pass {
			verdict = "PASS"
		}
		fmt.Fprintf(w, "TARGET %s %s %s %s %s\n", g.name, fmtRatio(r), op, strconv.FormatFloat(g.threshold, 'f', -1, 64), verdict)
	}
}

// fmtRatio prints a value with 3 decimals, or enough digits to show a small
// one, or n/a.
func fmtRatio(r ratio) string {
	if !r.ok || math.IsNaN(r.value) || math.IsInf(r.value, 0) {
		return "n/a"
	}
	return fmtNum(r.value)
}

func fmtNum(v float64) string {
	if math.Abs(v) >= 0.01 || v == 0 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.6f", v)
}

// ms prints a latency in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// writeTable writes the results table: medians of rps, p50 and p99 over the
// rounds; non-2xx, requests and socket errors summed over them.
func writeTable(w io.Writer, sums []summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\trps\tp50 ms\tp99 ms\tnon-2xx\trequests\terrors\t")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t%d\t%d\t\n", s.name, s.rps, ms(s.p50), ms(s.p99), s.non2xx, s.requests, s.errors)
	}
	tw.Flush()
}

// writeCPU writes what a request costs in CPU time: each target's own
// servers, its Redis, the upstream and wrk, and the target's cores for
// 10,000 requests a second.
func writeCPU(w io.Writer, sums []summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\town µs\tredis µs\tupstream µs\twrk µs\tcores per 10k rps\t")
	for _, s := range sums {
		redis := "-"
		if s.counted {
			redis = fmt.Sprintf("%.1f", usec(s.redisCPU()))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.1f\t%.1f\t%.2f\t\n", s.name, usec(s.cpu.own), redis,
			usec(s.cpu.upstream), usec(s.cpu.generator), s.serverCPU().Seconds()*10_000)
	}
	tw.Flush()
}

// writeRounds writes each target's rps in every round (round order, not
// run order), to show the spread the medians hide.
func writeRounds(w io.Writer, sums []summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	var head strings.Builder
	head.WriteString("target\t")
	if len(sums) > 0 {
		for i := range sums[0].rpsByRound {
			fmt.Fprintf(&head, "r%d\t", i+1)
		}
	}
	head.WriteString("spread\t")
	fmt.Fprintln(tw, head.String())
	for _, s := range sums {
		var b strings.Builder
		b.WriteString(s.name + "\t")
		for _, v := range s.rpsByRound {
			fmt.Fprintf(&b, "%.0f\t", v)
		}
		lo, hi := slices.Min(s.rpsByRound), slices.Max(s.rpsByRound)
		fmt.Fprintf(&b, "%.1f%%\t", 100*(hi-lo)/s.rps)
		fmt.Fprintln(tw, b.String())
	}
	tw.Flush()
}

// anomalies are WARN lines: non-2xx where every request should pass,
// deny floods that let more than a handful through, socket errors, and a
// p99 comparison too small to tell from noise.
func anomalies(sums []summary) []string {
	var out []string
	if w := p99Noise(sums); w != "" {
		out = append(out, w)
	}
	for _, s := range sums {
		switch {
		case !s.deny && s.non2xx > 0:
			why := ""
			if s.counted {
				why = fmt.Sprintf(" (the gateway answered %.0f decisions 429 overloaded in those runs: Redis answered others but not these within redis.timeout, or no slot was free within redis.queue_timeout)", s.delta.Overloaded)
			}
			out = append(out, fmt.Sprintf("%s: %d non-2xx responses in %d of %d runs, where none are expected%s", s.name, s.non2xx, s.non2xxRuns, s.rounds, why))
		case s.deny && s.requests-s.non2xx > int64(s.rounds):
			out = append(out, fmt.Sprintf("%s: %d of %d requests admitted in a flood that should admit about one a minute", s.name, s.requests-s.non2xx, s.requests))
		}
		if s.errors > 0 {
			out = append(out, fmt.Sprintf("%s: %d socket errors (connect/read/write/timeout) in %d of %d runs", s.name, s.errors, s.errRun, s.rounds))
		}
	}
	return out
}

// writeRedis writes, for each target whose Redis counters were read, what
// its runs cost Redis: round trips (the gateway's metric) and each command
// (Redis's INFO commandstats), in all and per response; round trips also
// per second of load (each run lasted runFor). Then, per Redis server, each
// command's calls, usec and usec a call, and the server's CPU time, so that
// a Cluster's masters can be told apart.
func writeRedis(w io.Writer, sums []summary, runFor time.Duration) {
	for _, s := range sums {
		if !s.counted {
			continue
		}
		per := float64(s.requests)
		secs := runFor.Seconds() * float64(s.rounds)
		admitted := float64(max(1, s.requests-s.non2xx))
		fmt.Fprintf(w, "%s: %d responses (%d non-2xx, %.0f overloaded); round trips %.0f (%s per response, %s per second)", s.name, s.requests, s.non2xx,
			s.delta.Overloaded, s.delta.RoundTrips, fmtNum(s.delta.RoundTrips/per), fmtNum(s.delta.RoundTrips/secs))
		names := slices.Sorted(maps.Keys(s.delta.Calls))
		for _, name := range names {
			n := s.delta.Calls[name]
			fmt.Fprintf(w, "; %s %d (%s)", name, n, fmtNum(float64(n)/per))
		}
		fmt.Fprintf(w, "; script usec %d (%s per 2xx); redis cpu %.0f ms (%s µs per 2xx)", s.delta.ScriptUsec, fmtNum(float64(s.delta.ScriptUsec)/admitted),
			1e3*s.delta.CPU, fmtNum(1e6*s.delta.CPU/admitted))
		fmt.Fprintln(w)
		for _, addr := range slices.Sorted(maps.Keys(s.delta.Nodes)) {
			n := s.delta.Nodes[addr]
			fmt.Fprintf(w, "  %s: cpu %.0f ms", addr, 1e3*n.CPU)
			for _, name := range slices.Sorted(maps.Keys(n.Calls)) {
				calls, usec := n.Calls[name], n.Usec[name]
				fmt.Fprintf(w, "; %s calls=%d usec=%d usec_per_call=%s", name, calls, usec, fmtNum(float64(usec)/float64(max(1, calls))))
			}
			fmt.Fprintln(w)
		}
	}
}

// p99Noise warns when the p99 nginx-limit_req adds to the upstream's is
// smaller than the spread of the upstream's own p99 over the rounds: the
// p99-added ratio is then mostly noise.
func p99Noise(sums []summary) string {
	var up, ng *summary
	for i := range sums {
		switch sums[i].name {
		case tUpstream:
			up = &sums[i]
		case tNginxLimitReq:
			ng = &sums[i]
		}
	}
	if up == nil || ng == nil || len(up.p99ByRound) < 2 {
		return ""
	}
	added := ng.p99 - up.p99
	lo, hi := slices.Min(up.p99ByRound), slices.Max(up.p99ByRound)
	if added >= hi-lo {
		return ""
	}
	return fmt.Sprintf("p99-added/nginx-p99-added: nginx-limit_req adds %sms to the upstream's p99, while the upstream's own p99 ranged %s–%sms over the rounds: the ratio is mostly noise",
		ms(added), ms(lo), ms(hi))
}

// usecRatio is Redis's script CPU per admitted request of target a over
// that of b ("redis-usec-per-decision a/b"): what a decision costs Redis on
// each, measured in the same run.
func usecRatio(by map[string]summary, a, b string) ratio {
	return perDecisionRatio(by, "redis-usec-per-decision", a, b, func(c counters) float64 { return float64(c.ScriptUsec) })
}

// cpuRatio is usecRatio from the Redis processes' CPU time ("redis-cpu-per-
// decision a/b"): everything Redis spent, not only inside the scripts, and
// none of the time a loaded machine kept it waiting.
func cpuRatio(by map[string]summary, a, b string) ratio {
	return perDecisionRatio(by, "redis-cpu-per-decision", a, b, func(c counters) float64 { return c.CPU })
}

func perDecisionRatio(by map[string]summary, prefix, a, b string, cost func(counters) float64) ratio {
	name := prefix + " " + a + "/" + b
	sa, okA := by[a]
	sb, okB := by[b]
	if !okA || !okB || !sa.counted || !sb.counted {
		return ratio{name: name}
	}
	pa := cost(sa.delta) / float64(max(1, sa.requests-sa.non2xx))
	pb := cost(sb.delta) / float64(max(1, sb.requests-sb.non2xx))
	if pb == 0 {
		return ratio{name: name}
	}
	return ratio{name: name, value: pa / pb, ok: true}
}
