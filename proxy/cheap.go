package proxy

import (
	"context"
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

// peekBeforeBody peeks at an llm call's checks as its headers give them
// (the policies not keyed on the model, each taking one) and refuses the
// call, writing the answer to w, when one of them would refuse it now
// whatever its size. It returns what it peeked, for the headers of a later
// 429.
func (h *Handler) peekBeforeBody(w http.ResponseWriter, p *plan, rep *report, checks []limiter.Check, costs []policies.Cost) (peeked []limiter.Decision, refused bool) {
	r, route := p.r, p.route
	if p.subject.Tenant != nil {
		rep.tenant = p.subject.Tenant.Name
	}
	if len(checks) == 0 {
		return nil, false
	}
	all, allCosts := checks, costs
	if r.ContentLength >= 0 && r.ContentLength <= peekSharedAbove {
		// A small body costs less to count than a round trip to Redis,
		// and the decision asks Redis anyway: only in-process policies are
		// peeked (for free).
		checks, costs = localChecks(checks, costs)
		if len(checks) == 0 {
			return nil, false
		}
	}
	start := time.Now()
	peeked = peekInto(r.Context(), h.limiter, checks, p.peekBuf[:0])
	took := time.Since(start)
	provider := openAIErrors(r)
	for i, d := range peeked {
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
		v := limiter.DeniedBy(i, peeked)
		// The report counts the refusing policy only: the others were read,
		// not decided.
		counted := limiter.DeniedBy(i, make([]limiter.Decision, len(peeked)))
		for j := range peeked {
			counted.Decisions[j] = peeked[j]
			if j != i {
				counted.Decisions[j].Reason = limiter.ReasonNotAsked
			}
		}
		rep.recordDecision(route, decision{verdict: counted, costs: costs, backend: backendOf(checks), took: took}, nil)
		hv, hcosts := h.withUnpeeked(r.Context(), v, costs, checks, all, allCosts)
		setLLMHeaders(route, w.Header(), hv, hcosts, nil)
		h.refuse(w, r, route, v)
		return peeked, true
	}
	return peeked, false
}

// peekInto is lim's Peek, into ds's array when lim can (the engine can):
// the plan keeps what its llm call's peek saw without an allocation.
func peekInto(ctx context.Context, lim Limiter, checks []limiter.Check, ds []limiter.Decision) []limiter.Decision {
	if e, ok := lim.(*limiter.Engine); ok {
		return e.PeekInto(ctx, checks, ds)
	}
	return lim.Peek(ctx, checks)
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
	if len(left) == 0 || !h.headerPeeks.Allow() {
		return v, costs
	}
	v.Decisions = append(slices.Clone(v.Decisions), h.limiter.Peek(ctx, left)...)
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
	return append(slices.Clone(peeked), h.limiter.Peek(ctx, unread)...)
}

// localChecks returns the checks (and their costs) decided in-process:
// checks and costs themselves when every one is (most routes), no copy.
func localChecks(checks []limiter.Check, costs []policies.Cost) ([]limiter.Check, []policies.Cost) {
	if !slices.ContainsFunc(checks, func(c limiter.Check) bool { return c.Rule.Algorithm.Shared() }) {
		return checks, costs
	}
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

// countWithoutSlot is the body size up to which a call counts its tokens
// without a slot of the tokenize gate: tens of microseconds of work, which
// must not wait behind the large prompts the slots exist to bound.
const countWithoutSlot = 16 << 10

// tokenizeGate bounds how many calls count their tokens at once; a call
// that waits past wait for a slot is refused (503) rather than queued
// without end behind prompts that cost seconds.
type tokenizeGate struct {
	slots chan struct{}
	wait  time.Duration
}

func newTokenizeGate(slots int, wait time.Duration) tokenizeGate {
	if slots <= 0 {
		slots = defaultTokenizeSlots(runtime.GOMAXPROCS(0))
	}
	if wait <= 0 {
		wait = DefaultTokenizeWait
	}
	return tokenizeGate{slots: make(chan struct{}, slots), wait: wait}
}

// defaultTokenizeSlots is one slot fewer than procs (at least one): large
// prompts counting on every P would leave the small calls beside them
// queued for a P behind tens of milliseconds of counting; with one P never
// taken by counting, a small call waits for a goroutine switch at most.
func defaultTokenizeSlots(procs int) int { return max(procs-1, 1) }

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
