package proxy

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// decision is what the limiter made of one request's checks.
type decision struct {
	verdict limiter.Verdict
	// res is what an admitted request holds until it ends (llm tokens,
	// in-flight slots); nil when nothing is held.
	res *limiter.Reservation
	// costs holds each decided check's policy cost, aligned with the
	// verdict's decisions.
	costs []policies.Cost
	// shadowed are the denials of shadow policies: reported, not enforced.
	shadowed []limiter.Decision
	// delayed is how long the request waited for its turn (on_limit: delay).
	delayed time.Duration
	// backend is "redis" when a shared check was asked, else "local".
	backend string
	// took is how long the limiter took, waits excluded.
	took time.Duration
}

// decide is decideChecks in a span of its own when the request is
// recorded: the wait for the decision, on Redis the round trip that carries
// it (whose span links to this one, see tracing.RedisHook).
func (h *Handler) decide(p *plan) (decision, error) {
	ctx := p.r.Context()
	if h.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return h.decideChecks(ctx, p)
	}
	ctx, span := h.tracer.Start(ctx, "ratelimit decide", trace.WithAttributes(attrRoute.String(p.route.Name)))
	dec, err := h.decideChecks(ctx, p)
	attrs := []attribute.KeyValue{attrBackend.String(dec.backend), attrAllowed.Bool(err == nil && dec.verdict.Allowed)}
	if d, ok := dec.verdict.Deciding(); ok {
		attrs = append(attrs, attrPolicy.String(d.Policy), attrReason.String(d.Reason.String()))
	}
	if dec.delayed > 0 {
		attrs = append(attrs, attrDelayed.Float64(msec(dec.delayed)))
	}
	span.SetAttributes(attrs...)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return dec, err
}

// decideChecks asks the limiter about p's checks: with Reserve when the
// request holds something until it ends (p.reserve), with Decide otherwise.
//
// A denial by a shadow policy is not enforced: it is recorded, and the
// request is decided again without that check. The limiter counts a denied
// request nowhere, so the other policies count the request exactly as they
// would without the shadow policy. A denial by an on_limit: delay policy
// waits for the key's turn (its RetryAfter) and asks again, for at most the
// policy's max_delay in all and with at most max_waiters waiting per key;
// past either bound the denial stands.
func (h *Handler) decideChecks(ctx context.Context, p *plan) (decision, error) {
	route, checks, costs := p.route, p.checks, p.costs
	out := decision{backend: backendOf(checks)}
	if len(checks) == 0 {
		out.verdict = limiter.Verdict{Allowed: true}
		return out, nil
	}
	copied := false
	for {
		start := time.Now()
		var err error
		if p.reserve {
			out.verdict, out.res, err = h.limiter.Reserve(ctx, checks)
		} else {
			out.verdict, err = h.limiter.Decide(ctx, checks)
		}
		out.took += time.Since(start)
		if err != nil || out.verdict.Allowed {
			out.costs = costs
			markShadow(out.verdict, checks)
			return out, err
		}
		i, denied := out.verdict.DeniedBy()
		if !denied || i >= len(checks) {
			out.costs = costs
			return out, nil
		}
		d, c := out.verdict.Decisions[i], checks[i]
		if c.Rule.Shadow {
			d.Shadow = true
			out.shadowed = append(out.shadowed, d)
			if !copied { // the caller's slices stay as built
				checks, costs, copied = slices.Clone(checks), slices.Clone(costs), true
			}
			checks, costs = slices.Delete(checks, i, i+1), slices.Delete(costs, i, i+1)
			if len(checks) == 0 {
				out.verdict, out.res, out.costs = limiter.Verdict{Allowed: true}, nil, nil
				return out, nil
			}
			continue
		}
		if !h.waitTurn(ctx, route, c, d, &out.delayed) {
			h.noteRefusal(c, d)
			out.costs = costs
			markShadow(out.verdict, checks)
			return out, nil
		}
	}
}

func backendOf(checks []limiter.Check) string {
	for _, c := range checks {
		if c.Rule.Algorithm.Shared() {
			return "redis"
		}
	}
	return "local"
}

// Refusals hears of each request a limit refused, with the policy and the
// key it refused; *topk.Set satisfies it. It is called on the deny path:
// it must be cheap and safe for concurrent use, and it must never turn a
// key into a metric label.
type Refusals interface {
	Refused(policy, key string)
}

// noteRefusal tells h.refusals of a denial by a limit; not of Redis
// failing or of this instance being overloaded, which say nothing about
// the key.
func (h *Handler) noteRefusal(c limiter.Check, d limiter.Decision) {
	if h.refusals == nil || d.Reason == limiter.ReasonUnavailable || d.Reason == limiter.ReasonOverloaded {
		return
	}
	h.refusals.Refused(c.Rule.Name, c.Key)
}

// markShadow flags the decisions of shadow policies, so that headers and the
// 429 leave them out.
func markShadow(v limiter.Verdict, checks []limiter.Check) {
	for i := range v.Decisions {
		if i < len(checks) && checks[i].Rule.Shadow {
			v.Decisions[i].Shadow = true
		}
	}
}

// waitTurn waits for the turn of a request that c's policy denied with d,
// when the policy delays instead of rejecting and the bounds allow it. It
// reports whether the request waited (and should be decided again); waited
// accumulates the time spent.
func (h *Handler) waitTurn(ctx context.Context, route *policies.Route, c limiter.Check, d limiter.Decision, waited *time.Duration) bool {
	p := routePolicy(route, c.Rule)
	if p == nil || p.MaxDelay <= 0 {
		return false
	}
	if d.Reason != limiter.ReasonLimited && d.Reason != limiter.ReasonDenialCached {
		return false // a limit that can never pass, or Redis failing: waiting cannot help
	}
	wait := max(d.RetryAfter, time.Millisecond)
	if *waited+wait > p.MaxDelay {
		return false
	}
	key := c.Rule.Name + "\x00" + c.Key
	if !h.waiters.enter(key, p.MaxWaiters) {
		return false
	}
	defer h.waiters.leave(key)
	turn := make(chan struct{})
	t := h.turnAfter(wait, func() { close(turn) })
	select {
	case <-turn:
		*waited += wait
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

// routePolicy returns the policy of route whose rule is rule.
func routePolicy(route *policies.Route, rule *limiter.Rule) *policies.Policy {
	for _, p := range route.Policies {
		if p.Rule == rule {
			return p
		}
	}
	return nil
}

// waiters counts the requests waiting for their turn per policy and key.
// Only keys with waiters are kept.
type waiters struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *waiters) enter(key string, limit int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	if w.n[key] >= limit {
		return false
	}
	w.n[key]++
	return true
}

func (w *waiters) leave(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[key]--; w.n[key] <= 0 {
		delete(w.n, key)
	}
}

// count returns how many requests wait, over all keys (tests).
func (w *waiters) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.n {
		n += c
	}
	return n
}
