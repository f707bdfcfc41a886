package pool

import (
	"sync/atomic"
	"time"
)

// Member is what is known of one member of a pool: its traffic, its
// passive health and its active checks. It outlives the snapshots that keep
// its pool. Its fields are read and written atomically; a change of whether
// it is ejected is made under its Pools' lock, which counts the pool's.
type Member struct {
	Name string

	inflight, requests, errors atomic.Int64
	latency                    atomic.Int64 // nanoseconds, summed over requests

	// fails is the failures in a row; ejectedUntil and heldUntil (Unix
	// nanoseconds, 0 for none) are when an ejection and a Retry-After end;
	// ejections is the ejections in a row, which lengthen the next one.
	fails        atomic.Int64
	ejectedUntil atomic.Int64
	heldUntil    atomic.Int64
	ejections    atomic.Int64
	ejectedTotal atomic.Int64

	// down: the active checks took the member out; passes and failures
	// are their results in a row.
	down            atomic.Bool
	passes, flunked atomic.Int64
	probing         atomic.Bool
	nextProbe       atomic.Int64
}

// in reports whether the member takes requests at now.
func (m *Member) in(now time.Time) bool {
	t := now.UnixNano()
	return m.ejectedUntil.Load() <= t && m.heldUntil.Load() <= t && !m.down.Load()
}

// backAt is when the member takes requests again (now's, when it does):
// one its checks took down is back last.
func (m *Member) backAt(now time.Time) int64 {
	at := max(m.ejectedUntil.Load(), m.heldUntil.Load(), now.UnixNano())
	if m.down.Load() {
		at += int64(time.Hour)
	}
	return at
}

// Health is a member's state as explain and the metrics name it.
type Health string

// The states of a member.
const (
	Healthy Health = "healthy" // takes requests
	Ejected Health = "ejected" // out after failures in a row, until it is back by itself
	Held    Health = "held"    // out for the Retry-After it sent
	Down    Health = "down"    // out by its active checks, until they pass
)

// HealthAt is the member's state at now.
func (m *Member) HealthAt(now time.Time) Health {
	t := now.UnixNano()
	switch {
	case m.down.Load():
		return Down
	case m.ejectedUntil.Load() > t:
		return Ejected
	case m.heldUntil.Load() > t:
		return Held
	}
	return Healthy
}

// Outcome is how an attempt on a member went, for its health.
type Outcome int

// The outcomes of an attempt.
const (
	// Success: an answer that is not a 5xx.
	Success Outcome = iota
	// Failure: a connect error, a timeout, a broken exchange or a 5xx.
	Failure
	// Abandoned: the client went away; says nothing of the member.
	Abandoned
	// Deferred: a 429 or 503 with a Retry-After: the member asked for
	// time, which End gives it, and is not failing.
	Deferred
)

// Begin counts a request the i-th member starts on; it is in flight there
// until Release.
func (s *State) Begin(i int) {
	m := s.members[i]
	m.inflight.Add(1)
	m.requests.Add(1)
}

// Release ends the i-th member's request that Begin counted in flight:
// when its answer was passed on whole (a stream included), or when it was
// given up for a retry.
func (s *State) Release(i int) { s.members[i].inflight.Add(-1) }

// End counts how the i-th member's request went once its answer's headers
// arrived (or it failed): the outcome, how long that took and, when the
// member answered 429 or 503 with a Retry-After, for how long (0 for none)
// it wants no requests.
func (s *State) End(i int, now time.Time, o Outcome, took, retryAfter time.Duration) {
	m := s.members[i]
	m.latency.Add(int64(took))
	h := s.pool.Health
	if retryAfter > 0 {
		m.heldUntil.Store(now.Add(min(retryAfter, h.MaxEjection)).UnixNano())
	}
	switch o {
	case Success:
		if m.fails.Load() != 0 {
			m.fails.Store(0)
		}
		// Healthy for max_ejection since its last ejection ended: the
		// next one starts short again.
		if m.ejections.Load() != 0 && now.UnixNano()-m.ejectedUntil.Load() >= int64(h.MaxEjection) {
			m.ejections.Store(0)
		}
	case Failure:
		m.errors.Add(1)
		if m.fails.Add(1) >= int64(h.Failures) {
			s.eject(i, now)
		}
	}
}

// eject takes the i-th member out, unless half of the pool is out already:
// then it keeps serving, as the least bad. The n-th ejection in a row lasts
// n times ejection, up to max_ejection.
func (s *State) eject(i int, now time.Time) {
	p := s.pools
	p.mu.Lock()
	defer p.mu.Unlock()
	m := s.members[i]
	t := now.UnixNano()
	if m.ejectedUntil.Load() > t || m.fails.Load() < int64(s.pool.Health.Failures) {
		return // another failure ejected it first
	}
	out := 0
	for _, o := range s.members {
		if o.ejectedUntil.Load() > t || o.down.Load() {
			out++
		}
	}
	if (out+1)*2 > len(s.members) {
		return
	}
	n := m.ejections.Add(1)
	h := s.pool.Health
	d := min(time.Duration(n)*h.Ejection, h.MaxEjection)
	m.fails.Store(0)
	m.ejectedUntil.Store(now.Add(d).UnixNano())
	m.ejectedTotal.Add(1)
}

// MemberStats is what the metrics read of a member.
type MemberStats struct {
	Route, Member string
	// InFlight, Requests, Errors and Ejections count its requests: those
	// now, all, the failed ones, and the times it was ejected.
	InFlight, Requests, Errors, Ejections int64
	// Latency is the time its requests took to their answer's headers,
	// summed.
	Latency time.Duration
	Health  Health
}

// Stats reads every member of the current snapshot's pools.
func (p *Pools) Stats() []MemberStats {
	idx := p.current()
	if idx == nil {
		return nil
	}
	now := p.now()
	var out []MemberStats
	for _, st := range idx.states {
		for _, m := range st.members {
			out = append(out, MemberStats{
				Route: st.Route, Member: m.Name,
				InFlight: m.inflight.Load(), Requests: m.requests.Load(), Errors: m.errors.Load(),
				Ejections: m.ejectedTotal.Load(), Latency: time.Duration(m.latency.Load()), Health: m.HealthAt(now),
			})
		}
	}
	return out
}
