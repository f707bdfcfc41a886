package redislimit_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// Helpers of the limit-under-pressure suite. They use the limiter's public
// API only, so the suite checks whatever implementation sits behind it.

// floodWorkers is how many goroutines hammer one key: the issue asks for
// 64 or more concurrent clients.
const floodWorkers = 64

// boundSlack is the documented tolerance of every upper bound: one event,
// for the discrete emission of GCRA and token buckets and for the gateway
// and Redis reading the clock at slightly different instants.
const boundSlack = 1

// lowerFraction is the share of the bound a limiter under saturation must
// admit: the "never below 95% of it".
const lowerFraction = 0.95

// windowMargin is how far inside a window (of the sliding or fixed
// algorithm) both ends of a request must lie for the test to be sure Redis
// decided it in that window: Redis reads its clock in microseconds, the
// fixed window in milliseconds, and Redis and the test read the same system
// clock at slightly different instants.
const windowMargin = time.Millisecond

// outcome is one decision of a flood. Times are wall-clock nanoseconds
// (Redis uses the same system clock), so they can be placed in the fixed
// window's aligned windows.
type outcome struct {
	sent, recv int64
	retryAfter time.Duration
	allowed    bool
	reason     limiter.Reason
	denied     int8 // index of the denying check, -1 when allowed
}

func (o outcome) sentAt() time.Time { return time.Unix(0, o.sent) }
func (o outcome) recvAt() time.Time { return time.Unix(0, o.recv) }

// failed reports whether a failure mode decided the request, or the
// instance denied it as overloaded: Redis did not.
func (o outcome) failed() bool {
	return o.reason == limiter.ReasonFailedOpen || o.reason == limiter.ReasonUnavailable ||
		o.reason == limiter.ReasonLocalFallback || o.reason == limiter.ReasonOverloaded
}

// floodResult is what one flood saw. Admissions and decisions taken by a
// failure mode are kept one by one (their times matter); plain denials,
// which a flood makes by the hundred thousand, are only counted.
type floodResult struct {
	outcomes []outcome // admitted or failed, sorted by send time
	requests int
	span     span                   // of every request
	denials  []denialTally          // by the index of the denying check
	reasons  map[limiter.Reason]int // of the deciding check, or the failure mode
	errs     int
	firstErr error
}

// denialTally counts the plain denials by one check.
type denialTally struct {
	n         int
	longest   time.Duration // longest retry given
	over      int           // retries above the flood's retryLimit
	firstRecv time.Time
}

func (d *denialTally) add(o outcome, limit time.Duration) {
	if d.n == 0 || o.recvAt().Before(d.firstRecv) {
		d.firstRecv = o.recvAt()
	}
	d.n++
	d.longest = max(d.longest, o.retryAfter)
	if limit > 0 && o.retryAfter > limit {
		d.over++
	}
}

func (d *denialTally) merge(o denialTally) {
	if o.n == 0 {
		return
	}
	if d.n == 0 || o.firstRecv.Before(d.firstRecv) {
		d.firstRecv = o.firstRecv
	}
	d.n += o.n
	d.longest = max(d.longest, o.longest)
	d.over += o.over
}

// flood runs workers goroutines that each decide checks on e in a loop,
// until d has passed or maxRequests decisions were made in all; denials
// whose retry exceeds retryLimit (when not zero) are counted apart. It
// returns once every worker stopped; nothing outlives it.
func flood(e *limiter.Engine, checks []limiter.Check, workers int, d time.Duration, maxRequests int64, retryLimit time.Duration) floodResult {
	return floodUntil(e, checks, workers, d, nil, maxRequests, retryLimit)
}

// floodUntil is flood that also stops when halt is closed (nil: never).
func floodUntil(e *limiter.Engine, checks []limiter.Check, workers int, d time.Duration, halt <-chan struct{}, maxRequests int64, retryLimit time.Duration) floodResult {
	var (
		n    atomic.Int64
		mu   sync.Mutex
		wg   sync.WaitGroup
		stop = time.Now().Add(d)
	)
	res := floodResult{denials: make([]denialTally, len(checks)), reasons: map[limiter.Reason]int{}}
	for range workers {
		wg.Go(func() {
			var kept []outcome
			var sp span
			requests, errs := 0, 0
			var firstErr error
			denials := make([]denialTally, len(checks))
			why := map[limiter.Reason]int{}
			for n.Add(1) <= maxRequests {
				sent := time.Now()
				if !sent.Before(stop) || halted(halt) {
					break
				}
				v, err := e.Decide(context.Background(), checks)
				recv := time.Now()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				i, denied := v.DeniedBy()
				o := outcome{sent: sent.UnixNano(), recv: recv.UnixNano(), allowed: v.Allowed, denied: -1}
				if denied {
					o.denied = int8(i)
				}
				if d, ok := v.Deciding(); ok {
					o.reason, o.retryAfter = d.Reason, d.RetryAfter
				}
				// A failure mode on any check matters, not only on the
				// deciding one.
				for _, d := range v.Decisions {
					if d.Reason == limiter.ReasonFailedOpen || d.Reason == limiter.ReasonUnavailable ||
						d.Reason == limiter.ReasonLocalFallback || d.Reason == limiter.ReasonOverloaded {
						o.reason = d.Reason
					}
				}
				sp.add(o)
				requests++
				why[o.reason]++
				if o.allowed || o.failed() || !denied || i >= len(denials) {
					kept = append(kept, o)
					continue
				}
				denials[i].add(o, retryLimit)
			}
			mu.Lock()
			defer mu.Unlock()
			res.outcomes = append(res.outcomes, kept...)
			if requests > 0 {
				res.span.merge(sp, res.requests == 0)
			}
			res.requests += requests
			for i := range denials {
				res.denials[i].merge(denials[i])
			}
			for r, k := range why {
				res.reasons[r] += k
			}
			res.errs += errs
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
		})
	}
	wg.Wait()
	slices.SortFunc(res.outcomes, func(a, b outcome) int { return cmp.Compare(a.sent, b.sent) })
	return res
}

func halted(halt <-chan struct{}) bool {
	select {
	case <-halt:
		return true
	default:
		return false
	}
}

// span is a flood's timing: outer runs from the first request sent to the
// last answer (every decision happened inside it: the upper bounds use it);
// inner from the first answer to the last request sent (decisions were
// being made over at least this much: the lower bounds use it).
type span struct {
	firstSent, lastSent, firstRecv, lastRecv time.Time
}

// add widens the span to o; the zero span takes o as it is.
func (s *span) add(o outcome) {
	first := s.firstSent.IsZero()
	if first || o.sentAt().Before(s.firstSent) {
		s.firstSent = o.sentAt()
	}
	if first || o.sentAt().After(s.lastSent) {
		s.lastSent = o.sentAt()
	}
	if first || o.recvAt().Before(s.firstRecv) {
		s.firstRecv = o.recvAt()
	}
	if first || o.recvAt().After(s.lastRecv) {
		s.lastRecv = o.recvAt()
	}
}

// merge widens the span to o's; with first, s takes o as it is.
func (s *span) merge(o span, first bool) {
	if first {
		*s = o
		return
	}
	s.firstSent = minTime(s.firstSent, o.firstSent)
	s.lastSent = maxTime(s.lastSent, o.lastSent)
	s.firstRecv = minTime(s.firstRecv, o.firstRecv)
	s.lastRecv = maxTime(s.lastRecv, o.lastRecv)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (s span) outer() time.Duration { return s.lastRecv.Sub(s.firstSent) }
func (s span) inner() time.Duration { return max(0, s.lastSent.Sub(s.firstRecv)) }

// count returns how many outcomes satisfy keep.
func count(os []outcome, keep func(outcome) bool) int {
	n := 0
	for _, o := range os {
		if keep(o) {
			n++
		}
	}
	return n
}

func isAllowed(o outcome) bool { return o.allowed }

// earned is what a token bucket or GCRA limit lets through over d on top of
// its burst.
func earned(lim limiter.Limit, d time.Duration) float64 {
	return float64(lim.Rate) * d.Seconds() / lim.Period.Seconds()
}

// bucketBounds are the bounds of a token bucket or GCRA limit over a flood:
// at most burst + rate × outer + slack, at least 95% of burst + rate × inner.
func bucketBounds(lim limiter.Limit, s span) (upper, lower float64) {
	burst := float64(lim.Burst)
	if burst == 0 {
		burst = float64(lim.Rate)
	}
	upper = burst + earned(lim, s.outer()) + boundSlack
	lower = math.Floor(lowerFraction * (burst + earned(lim, s.inner())))
	return upper, lower
}

// maxInSlidingWindow returns the most admissions that certainly fell in one
// window of length per (less windowMargin): for each admission's send time
// t, those sent at or after t and answered before t + per. Redis decided
// them inside that window, whatever the latency.
func maxInSlidingWindow(os []outcome, per time.Duration) int {
	adm := slices.DeleteFunc(slices.Clone(os), func(o outcome) bool { return !o.allowed })
	length := (per - windowMargin).Nanoseconds()
	most := 0
	for i, o := range adm {
		n := 0
		for _, p := range adm[i:] {
			if p.sent-o.sent >= length {
				break
			}
			if p.recv-o.sent < length {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// perFixedWindow counts the admissions that certainly fell in each aligned
// window of per (Unix time multiples, as the fixed window's script aligns
// them on Redis's clock): both ends of the request inside it, windowMargin
// away from its edges.
func perFixedWindow(os []outcome, per time.Duration) map[int64]int {
	p := per.Nanoseconds()
	m := windowMargin.Nanoseconds()
	out := map[int64]int{}
	for _, o := range os {
		if !o.allowed {
			continue
		}
		w := o.sent / p
		if o.recv/p != w || o.sent-w*p < m || (w+1)*p-o.recv < m {
			continue
		}
		out[w]++
	}
	return out
}

// fixedWindowsTouched is how many aligned windows of per the interval
// [from, to] touches.
func fixedWindowsTouched(from, to time.Time, per time.Duration) int64 {
	p := per.Nanoseconds()
	return to.UnixNano()/p - from.UnixNano()/p + 1
}

// fixedWindowsSaturated is how many aligned windows of per overlap [from,
// to] by at least least: a flood of 64 workers takes a window's whole quota
// in far less than that.
func fixedWindowsSaturated(from, to time.Time, per, least time.Duration) int64 {
	p := per.Nanoseconds()
	var n int64
	for w := from.UnixNano() / p; w <= to.UnixNano()/p; w++ {
		lo := max(w*p, from.UnixNano())
		hi := min((w+1)*p, to.UnixNano())
		if time.Duration(hi-lo) >= least {
			n++
		}
	}
	return n
}

// waitIntoWindow waits, on the wall clock that Redis shares on this host,
// until the time is between from and to past the start of a window of per,
// so that a flood of known length touches a known number of fixed windows.
func waitIntoWindow(t *testing.T, per, from, to time.Duration) {
	t.Helper()
	into := time.Duration(time.Now().UnixNano() % per.Nanoseconds())
	if into >= from && into < to {
		return
	}
	wait := (per - into + from) % per
	// Waiting for a clock, not for an event: there is nothing to block on.
	<-time.After(wait)
}

// newClient builds a Redis client with go-redis's pool size and timeout
// (zero: the gateway's default, 30ms), closed when the test ends.
func newClient(t *testing.T, timeout time.Duration, addrs ...string) redis.UniversalClient {
	t.Helper()
	c, err := redisclient.New(redisclient.Options{Addrs: addrs, Timeout: timeout})
	if err != nil {
		t.Fatalf("NewRedisClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newRedisEngine builds an Engine on a Redis backend with cfg (zero fields:
// the gateway's defaults) and a logger that drops the output.
func newRedisEngine(t *testing.T, c redis.UniversalClient, cfg redislimit.Config) (*limiter.Engine, *redislimit.Limiter) {
	t.Helper()
	local := limiter.NewLocal(0)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := redislimit.New(c, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	e, err := limiter.NewEngine(time.Now, local, r)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	return e, r
}

// decideOnce runs one decision with a deadline.
func decideOnce(t *testing.T, e *limiter.Engine, checks ...limiter.Check) limiter.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := e.Decide(ctx, checks)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return v
}

// warmUp decides checks until they are admitted (for at most 5s): the
// connections are dialed and the scripts loaded before a flood is measured.
// A first decision that dials and loads a script on a loaded machine may
// miss the 30ms default deadline; the setup waits for it to succeed rather
// than count it.
func warmUp(t *testing.T, e *limiter.Engine, checks ...limiter.Check) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := decideOnce(t, e, checks...)
		if v.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm-up: still denied after 5s: %+v, want admitted", v.Decisions)
		}
		// Retrying a failed setup step; a breaker it opened lets a probe
		// through after its cooldown.
		<-time.After(10 * time.Millisecond)
	}
}

// deniedBy reports whether check i denied v.
func deniedBy(v limiter.Verdict, i int) bool {
	j, ok := v.DeniedBy()
	return ok && j == i
}

// reasonCounts names a flood's reason counts, for the log.
func (r floodResult) reasonCounts() map[string]int {
	m := map[string]int{}
	for why, n := range r.reasons {
		m[why.String()] += n
	}
	return m
}

// saturateWithin is how long a flood of floodWorkers needs to take all that
// a window (or a sliding window's wave) admits: the quotas here are at most
// 100, which 64 workers ask for within a few milliseconds.
const saturateWithin = 50 * time.Millisecond

// bounds returns the most and the least a limit of alg admits over a
// flood with span s when it is saturated, and the formula for the log.
//   - token bucket, GCRA: burst + rate × outer + slack; 95% of burst + rate × inner.
//   - sliding window: rate per window of length per, so over outer at most
//     rate × (⌊outer/per⌋ + 1) (+ slack); under saturation it admits rate in
//     waves per apart from the first answer on, so at least 95% of rate per
//     wave that had saturateWithin of flood left.
//   - fixed window: rate per aligned window touched by outer (widened by
//     windowMargin); at least 95% of rate per window the flood covered for
//     saturateWithin or more.
func bounds(alg limiter.Algorithm, lim limiter.Limit, s span) (upper, lower float64, how string) {
	rate := float64(lim.Rate)
	switch alg {
	case limiter.SlidingWindow:
		waves := 0.0
		if s.inner() >= saturateWithin {
			waves = math.Floor(float64(s.inner()-saturateWithin)/float64(lim.Period)) + 1
		}
		windows := math.Floor(float64(s.outer())/float64(lim.Period)) + 1
		return rate*windows + boundSlack, math.Floor(lowerFraction * rate * waves),
			fmt.Sprintf("%d per %s × %.0f windows over %s + %d; floor 95%% of %.0f waves over %s",
				lim.Rate, lim.Period, windows, s.outer().Round(time.Millisecond), boundSlack, waves, s.inner().Round(time.Millisecond))
	case limiter.FixedWindow:
		touched := fixedWindowsTouched(s.firstSent.Add(-windowMargin), s.lastRecv.Add(windowMargin), lim.Period)
		saturated := fixedWindowsSaturated(s.firstRecv, s.lastSent, lim.Period, saturateWithin)
		return rate * float64(touched), math.Floor(lowerFraction * rate * float64(saturated)),
			fmt.Sprintf("%d per aligned %s × %d windows touched; floor 95%% of %d windows saturated",
				lim.Rate, lim.Period, touched, saturated)
	default:
		upper, lower = bucketBounds(lim, s)
		return upper, lower, fmt.Sprintf("burst %d + %d/%s × %s + %d; floor 95%% of burst + rate × %s",
			lim.Burst, lim.Rate, lim.Period, s.outer().Round(time.Millisecond), boundSlack, s.inner().Round(time.Millisecond))
	}
}
