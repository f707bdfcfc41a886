package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// Cheap before costly. Counting an llm call's tokens is the costly step of
// its request: a 1 MiB prompt takes a good part of a second of CPU. So
// before the body is read, a call is answered when its headers already
// decide it: a missing or unknown key (401, after the policies that count
// requests took their share, so that guessing keys stays limited), or a
// policy that would refuse it now, read with a peek that takes nothing (the
// all-or-nothing decision after the body stays one round trip and gives
// nothing back). Token counting then runs at most a fixed number at a time.

// DefaultTokenizeWait is how long a call waits for a token-counting slot
// when Config.TokenizeWait is zero: far more than a slot is held for a
// prompt within max_body_bytes, and more than the first calls after a
// start wait while the vocabularies load (about 0.35 s each).
const DefaultTokenizeWait = 10 * time.Second

// preBody is what the gateway learned of a call before reading its body.
type preBody struct {
	// peeked holds the peek of every policy that keys without the body,
	// for the headers of a later 429.
	peeked []limiter.Decision
}

// beforeBody judges an llm call by its headers and reports whether it
// answered.
func (h *Handler) beforeBody(w http.ResponseWriter, r *http.Request, snap *policies.Snapshot, route *policies.Route, rep *report) (preBody, bool) {
	s, _ := identify(r, snap, route)
	if s.Tenant != nil {
		rep.tenant = s.Tenant.Name
	}
	pols := make([]*policies.Policy, 0, len(route.Policies))
	for _, p := range route.Policies {
		if !p.Reads.Model { // keyed by the model: known only from the body
			pols = append(pols, p)
		}
	}
	one := func(policies.Cost) int64 { return 1 }
	checks, costs, rejectedBy := checksOf(r, pols, &s, one)
	if rejectedBy != nil {
		h.rejectBeforeBody(w, r, snap, route, rep, checks, costs, rejectedBy)
		return preBody{}, true
	}
	p, ok := h.limiter.(peeker)
	if !ok || len(checks) == 0 {
		return preBody{}, false
	}
	all, allCosts := checks, costs
	if r.ContentLength >= 0 && r.ContentLength <= peekSharedAbove {
		// A small body costs less to count than a round trip to Redis,
		// and the decision asks Redis anyway: only in-process policies are
		// peeked (for free).
		checks, costs = localChecks(checks, costs)
		if len(checks) == 0 {
			return preBody{}, false
		}
	}
	start := time.Now()
	pb := preBody{peeked: p.Peek(r.Context(), checks)}
	took := time.Since(start)
	provider := openAIErrors(r)
	for i, d := range pb.peeked {
		if i >= len(checks) || d.Allowed || checks[i].Rule.Shadow || !refusing(d.Reason) {
			continue
		}
		if pol := routePolicy(route, checks[i].Rule); pol != nil && pol.MaxDelay > 0 {
			continue // on_limit: delay waits for its turn in decide
		}
		// A policy counting tokens was peeked for one: it refuses here
		// only what no wait fixes, since the call's real cost, and so its
		// real wait, are not known yet.
		if costs[i] != policies.CostRequests && !finalRefusal(d, provider) {
			continue
		}
		v := limiter.DeniedBy(i, pb.peeked)
		// The report counts the refusing policy only: the others were read,
		// not decided.
		counted := limiter.DeniedBy(i, make([]limiter.Decision, len(pb.peeked)))
		for j := range pb.peeked {
			counted.Decisions[j] = pb.peeked[j]
			if j != i {
				counted.Decisions[j].Reason = limiter.ReasonNotAsked
			}
		}
		rep.recordDecision(route, decision{verdict: counted, costs: costs, backend: backendOf(checks), took: took}, nil)
		hv, hcosts := h.withUnpeeked(r.Context(), v, costs, checks, all, allCosts)
		setLLMHeaders(route, w.Header(), hv, hcosts, nil)
		h.refuse(w, r, route, v)
		return pb, true
	}
	return pb, false
}

// rejectBeforeBody answers a call whose key is missing or unknown: the
// policies that count requests decide it (each guess costs its share, as
// on any route), then 401, or 429 when one of them refused.
func (h *Handler) rejectBeforeBody(w http.ResponseWriter, r *http.Request, snap *policies.Snapshot, route *policies.Route, rep *report,
	checks []limiter.Check, costs []policies.Cost, rejectedBy *policies.Policy) {
	var rc []limiter.Check
	var rcost []policies.Cost
	for i, c := range checks {
		if costs[i] == policies.CostRequests {
			rc, rcost = append(rc, c), append(rcost, costs[i])
		}
	}
	dec, err := h.decide(r, route, rc, rcost, false)
	rep.recordDecision(route, dec, err)
	rep.unauthorized = err == nil && dec.verdict.Allowed
	if err != nil {
		h.writeError(w, r, http.StatusInternalServerError, errorBody{Message: "the rate limiter failed; see the gateway log"},
			slog.String("route", route.Name), slog.Any("err", err))
		return
	}
	if !dec.verdict.Allowed {
		if r.Context().Err() != nil {
			h.logAnswer(r.Context(), r, statusClientClosed, "client left while waiting for its turn", slog.String("route", route.Name))
			w.WriteHeader(statusClientClosed)
			return
		}
		setLLMHeaders(route, w.Header(), dec.verdict, dec.costs, nil)
		h.refuse(w, r, route, dec.verdict)
		return
	}
	setRateLimitHeaders(w.Header(), dec.verdict, route.RateLimitHeaders)
	h.writeUnauthorized(w, r, snap, route, rejectedBy)
}

// peekSharedAbove is the body size from which a call's shared policies are
// peeked before it is tokenized: below it, counting its tokens (tens of
// microseconds per KiB) costs less than the round trip.
const peekSharedAbove = 16 << 10

// withUnpeeked returns v and costs for the headers of a refusal before the
// body, with a peek of each shared policy counting tokens or dollars that
// was left out of the peek (a small call's): one read of Redis on such a
// refusal, so the 429 carries every set that applies.
func (h *Handler) withUnpeeked(ctx context.Context, v limiter.Verdict, costs []policies.Cost, peekedChecks, all []limiter.Check, allCosts []policies.Cost) (limiter.Verdict, []policies.Cost) {
	if len(peekedChecks) == len(all) {
		return v, costs
	}
	var left []limiter.Check
	var leftCosts []policies.Cost
	for i, c := range all {
		if allCosts[i] != policies.CostRequests && c.Rule.Algorithm.Shared() {
			left, leftCosts = append(left, c), append(leftCosts, allCosts[i])
		}
	}
	p, ok := h.limiter.(peeker)
	if !ok || len(left) == 0 || !h.headerPeeks.Allow() {
		return v, costs
	}
	v.Decisions = append(slices.Clone(v.Decisions), p.Peek(ctx, left)...)
	return v, append(slices.Clone(costs), leftCosts...)
}

// headerPeeksPerSecond is how many refusals a second, per instance, read
// Redis for their headers alone; past it a refusal leaves out the sets it
// would have had to read.
const headerPeeksPerSecond = 100

// peekUnread returns peeked with a peek of each shared policy counting
// tokens or dollars that a refusal left unread: another policy refused
// first, and the call was too small to peek its shared policies before its
// body. So a 429 on an llm route carries every set that applies with its
// true remaining, for one read of Redis on such a refusal.
func (h *Handler) peekUnread(ctx context.Context, checks []limiter.Check, costs []policies.Cost, v limiter.Verdict, peeked []limiter.Decision) []limiter.Decision {
	p, ok := h.limiter.(peeker)
	if !ok {
		return peeked
	}
	var unread []limiter.Check
	for i := range v.Decisions {
		d := &v.Decisions[i]
		if i >= len(checks) || i >= len(costs) || decided(d) || costs[i] == policies.CostRequests || !checks[i].Rule.Algorithm.Shared() {
			continue
		}
		if _, seen := peekedFor(peeked, d.Policy); !seen {
			unread = append(unread, checks[i])
		}
	}
	if len(unread) == 0 || !h.headerPeeks.Allow() {
		return peeked
	}
	return append(slices.Clone(peeked), p.Peek(ctx, unread)...)
}

// localChecks returns the checks (and their costs) decided in-process.
func localChecks(checks []limiter.Check, costs []policies.Cost) ([]limiter.Check, []policies.Cost) {
	var lc []limiter.Check
	var lcost []policies.Cost
	for i, c := range checks {
		if !c.Rule.Algorithm.Shared() {
			lc, lcost = append(lc, c), append(lcost, costs[i])
		}
	}
	return lc, lcost
}

// refusing reports whether a peeked denial is one the decision would make
// too: a limit, not a failure to ask.
func refusing(reason limiter.Reason) bool {
	switch reason {
	case limiter.ReasonLimited, limiter.ReasonDenialCached, limiter.ReasonDenyAll, limiter.ReasonCostTooHigh:
		return true
	}
	return false
}

func backendOf(checks []limiter.Check) string {
	for _, c := range checks {
		if c.Rule.Algorithm.Shared() {
			return "redis"
		}
	}
	return "local"
}

// tokenizeGate bounds how many calls count their tokens at once; a call
// that waits past wait for a slot is refused (503) rather than queued
// without end behind prompts that cost seconds.
type tokenizeGate struct {
	slots chan struct{}
	wait  time.Duration
}

func newTokenizeGate(slots int, wait time.Duration) tokenizeGate {
	if slots <= 0 {
		slots = runtime.GOMAXPROCS(0)
	}
	if wait <= 0 {
		wait = DefaultTokenizeWait
	}
	return tokenizeGate{slots: make(chan struct{}, slots), wait: wait}
}

// enter takes a slot, waiting at most g.wait; ok is false when none came
// (or the client left). release gives the slot back.
func (g tokenizeGate) enter(ctx context.Context) (release func(), ok bool) {
	select {
	case g.slots <- struct{}{}:
		return g.leave, true
	default:
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return g.leave, true
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}

func (g tokenizeGate) leave() { <-g.slots }
