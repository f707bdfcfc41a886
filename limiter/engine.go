package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Backend decides checks whose state is shared (see redislimit). It returns
// one decision per check. When one of them denies, none of the checks
// consumed anything and shared is nil; otherwise shared, when not nil,
// settles what Redis recorded for the request. It never returns an error for
// an unreachable Redis, only decisions with the matching Reason: it answers
// FailAllow and FailDeny itself, and hands a FailLocal check to fallback,
// which the Engine owns.
type Backend interface {
	Decide(ctx context.Context, checks []Check, fallback Fallback) (decisions []Decision, shared Settler)
}

// Fallback decides check i of a Backend's Decide in-process, at the share of
// its limit that FailLocal enforces, when Redis could not answer it. The
// Engine passes one with every Decide and keeps what it takes in the
// request's Reservation; the Backend calls it from Decide's goroutine, before
// Decide returns, at most once per check. A nil Fallback answers such a check
// ReasonUnavailable, as FailDeny would.
type Fallback func(i int) Decision

// Peeker is a Backend that can report checks' state without taking
// anything (redislimit's can).
type Peeker interface {
	Peek(ctx context.Context, checks []Check) []Decision
}

// Settler is the shared part of a Reservation: what a Backend recorded for
// an admitted request.
type Settler interface {
	// Settle makes check i hold units[i] (its real cost): what was taken
	// beyond it goes back, what it cost beyond is taken, past the limit if
	// need be. All zeros give everything back.
	Settle(ctx context.Context, units []int64)
}

// Renewer is a Settler whose slots (SharedConcurrency) are leases that lapse
// unless renewed while the request runs (see Reservation.KeepAlive).
type Renewer interface {
	// RenewEvery is how often Renew must run to keep the leases; zero when
	// the Settler holds none.
	RenewEvery() time.Duration
	// Renew extends every lease still held by a full lease from now.
	Renew(ctx context.Context)
}

// Engine is the Limiter used by the proxy: in-process token buckets for local
// policies and, when configured, a Backend for the shared ones. Local checks
// run first, so a request they deny never reaches Redis. It alone owns the
// in-process buckets, the fallback shares of FailLocal policies among them
// (see Fallback). Engine is safe for concurrent use.
type Engine struct {
	clock  func() time.Time
	local  *Local
	shared Backend
}

var _ Limiter = (*Engine)(nil)

// ErrNoSharedBackend is returned by Decide for a shared algorithm when the
// engine was built without Redis (the config rejects this earlier).
var ErrNoSharedBackend = errors.New("limiter: policy needs redis but none is configured")

// NewEngine returns an Engine. clock is required; shared may be nil when no
// Redis is configured.
func NewEngine(clock func() time.Time, local *Local, shared Backend) (*Engine, error) {
	if clock == nil {
		return nil, errors.New("limiter: nil clock")
	}
	if local == nil {
		return nil, errors.New("limiter: nil local buckets")
	}
	return &Engine{clock: clock, local: local, shared: shared}, nil
}

// Decide asks every check and returns one verdict. A request denied by one
// check consumes nothing from the others. Nothing is held afterwards: the
// slot of an InFlight check is given back at once (use Reserve to hold it
// while the request runs).
func (e *Engine) Decide(ctx context.Context, checks []Check) (Verdict, error) {
	if v, ok := e.decideLocal(checks); ok {
		return v, nil
	}
	v, res, err := e.Reserve(ctx, checks)
	if res != nil && res.inFlight() {
		err = errors.Join(err, res.Done(ctx))
	}
	return v, err
}

// maxFastChecks bounds the checks decideLocal takes: its holds live in an
// array on the stack.
const maxFastChecks = 8

// decideLocal is Decide for the common request whose checks are all local
// rate checks: the same decisions, with nothing allocated but the verdict's
// decisions (no Reservation, its takes on the stack). ok is false when it
// does not apply.
func (e *Engine) decideLocal(checks []Check) (Verdict, bool) {
	if len(checks) > maxFastChecks {
		return Verdict{}, false
	}
	for _, c := range checks {
		if c.Rule == nil || c.Rule.Algorithm.Shared() || c.Rule.Algorithm.InFlight() {
			return Verdict{}, false
		}
	}
	// Every decision is written below, so the allow path fills none ahead;
	// a denial fills those it left unasked.
	v := Verdict{Allowed: true, Decisions: make([]Decision, len(checks))}
	var takes [maxFastChecks]localTake
	now := e.clock()
	for i, c := range checks {
		d, ok := e.local.take(now, c.Rule, c.group(), c.Key, c.Units(), &takes[i])
		v.Decisions[i] = d
		if !ok {
			for j := range i {
				takes[j].release()
			}
			v.deniedLocally(checks, i)
			return v, true
		}
	}
	return v, true
}

// Reserve is Decide for a request whose real cost is known only later (an
// LLM call's tokens): the checks take their Cost now, and the Reservation,
// nil unless the request was admitted, settles what they took once the real
// cost is known.
func (e *Engine) Reserve(ctx context.Context, checks []Check) (Verdict, *Reservation, error) {
	allShared := true
	for _, c := range checks {
		if c.Rule == nil {
			return Verdict{}, nil, errors.New("limiter: check without policy")
		}
		allShared = allShared && c.Rule.Algorithm.Shared()
	}
	v := Verdict{Allowed: true}
	if !allShared || e.shared == nil {
		// A request of shared checks alone takes the backend's decisions
		// as its own (below): one allocation fewer on the Redis path.
		// Every decision is written below unless a local check denies,
		// which fills those it left unasked.
		v.Decisions = make([]Decision, len(checks))
	}
	res := &Reservation{clock: e.clock, checks: checks}
	if len(checks) == 1 {
		res.local, res.sharedIdx = res.local1[:], res.idx1[:0]
	} else {
		res.local = make([]localTake, len(checks))
	}
	now := e.clock()
	for i, c := range checks {
		if c.Rule.Algorithm.Shared() {
			res.sharedIdx = append(res.sharedIdx, i)
			continue
		}
		d := e.local.reserve(now, c.Rule, c.group(), c.Key, c.Units(), &res.local[i])
		v.Decisions[i] = d
		if !d.Allowed {
			res.release()
			v.deniedLocally(checks, i)
			return v, nil, nil
		}
	}
	if len(res.sharedIdx) == 0 {
		return v, res, nil
	}
	if e.shared == nil {
		res.release()
		return Verdict{}, nil, ErrNoSharedBackend
	}

	sc := checks
	if !allShared {
		sc = make([]Check, len(res.sharedIdx))
		for j, i := range res.sharedIdx {
			sc[j] = checks[i]
		}
	}
	// Shared checks come last, so nothing after them can deny the request.
	ds, shared := e.shared.Decide(ctx, sc, func(j int) Decision {
		i := res.sharedIdx[j]
		return e.fallback(checks[i], &res.local[i])
	})
	if allShared {
		v.Decisions = ds
	}
	for j, i := range res.sharedIdx {
		v.Decisions[i] = ds[j]
		if !ds[j].Allowed && v.Allowed && ds[j].Reason != ReasonNotAsked {
			v.deny(i)
		}
	}
	if !v.Allowed {
		res.release()
		v.refunded(checks, len(checks))
		return v, nil, nil
	}
	res.shared = shared
	return v, res, nil
}

// fallback decides c, a shared check that Redis could not answer, at the
// share of its limit this instance enforces alone (FailLocal), in buckets
// or slots of their own (BucketGroup.Fallback); what it takes goes into t.
func (e *Engine) fallback(c Check, t *localTake) Decision {
	d := e.local.reserve(e.clock(), c.Rule, fallbackGroup(c), c.Key, c.Units(), t)
	d.Policy = c.Rule.Name
	if d.Reason == ReasonNone || d.Reason == ReasonLimited {
		d.Reason = ReasonLocalFallback
	}
	return d
}

// fallbackGroup is where c's fallback share is kept.
func fallbackGroup(c Check) BucketGroup {
	return BucketGroup{Policy: c.Rule.Name, Limit: fallbackLimit(c), Fallback: true, Algorithm: c.Rule.Algorithm}
}

// fallbackLimit is the share of c's limit one instance enforces alone while
// Redis cannot answer (FailLocal): rate and quota scaled by LocalShare (zero
// means 1), at least 1 each.
func fallbackLimit(c Check) Limit {
	share := c.Rule.LocalShare
	if share <= 0 {
		share = 1
	}
	// The epsilon keeps 100 * 0.29 (28.999999999999996) at 29.
	scale := func(n int64) int64 { return max(1, int64(float64(n)*share+1e-9)) }
	return Limit{Rate: scale(c.Limit.Rate), Period: c.Limit.Period, Burst: scale(c.Limit.Quota())}
}

// Peek reports every check's state (what remains, when it resets, whether
// its Units would pass and when they could) without taking anything: what a
// quota report shows, and what the proxy asks before a costly step.
// Without a shared backend that can peek, shared checks come back
// ReasonUnavailable.
func (e *Engine) Peek(ctx context.Context, checks []Check) []Decision {
	return e.PeekInto(ctx, checks, nil)
}

// PeekInto is Peek into ds's array when it holds every check's decision
// (the caller's own, which it keeps for as long as it needs them).
func (e *Engine) PeekInto(ctx context.Context, checks []Check, ds []Decision) []Decision {
	if cap(ds) >= len(checks) {
		ds = ds[:len(checks)]
		clear(ds)
	} else {
		ds = make([]Decision, len(checks))
	}
	now := e.clock()
	var shared []Check
	var sharedIdx []int
	for i, c := range checks {
		if c.Rule == nil {
			continue
		}
		if c.Rule.Algorithm.Shared() {
			shared, sharedIdx = append(shared, c), append(sharedIdx, i)
			continue
		}
		ds[i] = e.local.PeekN(now, c.group(), c.Key, c.Units())
	}
	if len(shared) == 0 {
		return ds
	}
	if p, ok := e.shared.(Peeker); ok {
		for j, d := range p.Peek(ctx, shared) {
			ds[sharedIdx[j]] = d
		}
		return ds
	}
	for _, i := range sharedIdx {
		ds[i] = Decision{Policy: checks[i].Rule.Name, Limit: checks[i].Limit, Reason: ReasonUnavailable}
	}
	return ds
}

// Reservation is what an admitted request took from each of its policies
// (tokens of local buckets, slots, fallback shares, and what Redis
// recorded), to be settled once its real cost is known: Settle to the real
// cost, Done at the cost reserved, Release for nothing. It belongs to one
// request.
type Reservation struct {
	clock     func() time.Time
	checks    []Check
	local     []localTake // by check: a local check's take, or a shared one's fallback share
	sharedIdx []int       // the shared checks, in order
	shared    Settler     // nil when Redis recorded nothing
	// local's and sharedIdx's backing arrays for a request of one check.
	local1 [1]localTake
	idx1   [1]int
}

// Settle makes check i hold actual[i] units (values below 0 count as 0):
// what was reserved beyond the real cost goes back, what it cost beyond the
// reservation is taken, past the limit if need be, so that later requests
// wait for it. actual must have one value per check. A request that never
// reached the upstream settles with zeros. Settling means the request ended:
// the slot of an InFlight check is given back whatever actual says.
func (r *Reservation) Settle(ctx context.Context, actual []int64) error {
	if len(actual) != len(r.checks) {
		return fmt.Errorf("limiter: settling %d checks with %d costs", len(r.checks), len(actual))
	}
	// Read, not copied: actual is the caller's.
	cost := func(i int) int64 {
		if r.checks[i].Rule.Algorithm.InFlight() {
			return 0
		}
		return actual[i]
	}
	now := r.clock()
	for i := range r.local {
		r.local[i].adjust(now, cost(i))
	}
	if r.shared != nil {
		units := make([]int64, len(r.sharedIdx))
		for j, i := range r.sharedIdx {
			units[j] = max(cost(i), 0)
		}
		r.shared.Settle(ctx, units)
	}
	return nil
}

// Release gives back everything the request took: it settles with zeros,
// for a request that never reached the upstream.
func (r *Reservation) Release(ctx context.Context) error {
	return r.Settle(ctx, make([]int64, len(r.checks)))
}

// Done settles a request whose cost was what it reserved: each check keeps
// its Units, and InFlight checks give their slot back.
func (r *Reservation) Done(ctx context.Context) error {
	units := make([]int64, len(r.checks))
	for i, c := range r.checks {
		units[i] = c.Units()
	}
	return r.Settle(ctx, units)
}

// KeepAlive renews the request's leases (SharedConcurrency slots) until
// stop is called, in one goroutine that stop ends and waits for; without
// leases it starts nothing. Call stop before Settle (stop is idempotent).
// Renewals run detached from ctx's cancellation, so a client that hung up
// keeps its lease until the request is settled, never past it; a crashed
// instance stops renewing and its leases lapse by themselves.
func (r *Reservation) KeepAlive(ctx context.Context) (stop func()) {
	rn, ok := r.shared.(Renewer)
	if !ok || rn.RenewEvery() <= 0 {
		return func() {}
	}
	every := rn.RenewEvery()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				rn.Renew(ctx)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}

// Checks returns the checks r holds, in order: those a later Reserve for
// more of the same (a stream taking another window) starts from.
func (r *Reservation) Checks() []Check { return slices.Clone(r.checks) }

// inFlight reports whether a check of r holds a slot.
func (r *Reservation) inFlight() bool {
	for _, c := range r.checks {
		if c.Rule.Algorithm.InFlight() {
			return true
		}
	}
	return false
}

// release gives back what was taken in-process (the local checks and the
// fallback shares) from a request that is denied: Redis recorded nothing.
func (r *Reservation) release() {
	for i := range r.local {
		r.local[i].release()
	}
}

// deniedLocally marks v denied by check i, a local one: the local checks
// before it took their cost and gave it back (see refunded); the checks
// after it and every shared one (asked after the local ones) were not asked.
func (v *Verdict) deniedLocally(checks []Check, i int) {
	v.refunded(checks, i)
	for j := range checks {
		if j > i || (j < i && checks[j].Rule.Algorithm.Shared()) {
			v.Decisions[j] = notAsked(checks[j])
		}
	}
	v.deny(i)
}

// refunded corrects the Remaining of the local decisions before check end,
// whose cost was given back, so that the headers of a denied request show
// what those policies really have left.
func (v *Verdict) refunded(checks []Check, end int) {
	for i, c := range checks[:end] {
		if c.Rule.Algorithm.Shared() {
			continue
		}
		d := &v.Decisions[i]
		d.Remaining = min(d.Remaining+c.Units(), d.Limit.Quota())
	}
}

// group is the local store c reserves from.
func (c Check) group() BucketGroup {
	return BucketGroup{Policy: c.Rule.Name, Limit: c.Limit, Algorithm: c.Rule.Algorithm}
}
