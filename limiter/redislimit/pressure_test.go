//go:build pressure

package redislimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// The limit-under-pressure suite, engine level (issue 6): one key hammered
// by 64 goroutines for each algorithm, two policies on one route under the
// same flood, the same on a 3-node Cluster, and Redis killed, hung and
// restarted mid-flood (pressure_redisdown_test.go). Every row logs
// "admitted X, bound Y" so a run shows the figures.
//
// The one-key rows and the Redis-down rows use the gateway's Redis defaults
// (30ms decision timeout, go-redis's pool of 10 per CPU, breaker after 3
// failures, 500ms cooldown), as a deployment does: a flood must not pass
// for a Redis failure. The one-key rows fail closed (on_redis_error: deny)
// so that a Redis process stalled for more than 30ms by a loaded machine
// can only cost an admission, never add one; the breaker must stay shut.
// The two-policy rows isolate the refund race (case 3) from that: their
// timeout is generous (twoPolicyTimeout).

// oneKeyRow is one algorithm's limit and flood length. Rates are low enough
// that a loaded 2-core machine under -race asks many times the bound.
type oneKeyRow struct {
	alg  limiter.Algorithm
	lim  limiter.Limit
	dur  time.Duration
	cap  int64 // most requests in the flood
	wait bool  // start the flood early in a fixed window
}

var oneKeyRows = []oneKeyRow{
	{alg: limiter.TokenBucket, lim: limiter.Limit{Rate: 200, Period: time.Second, Burst: 20}, dur: 2 * time.Second, cap: 2_000_000},
	{alg: limiter.GCRA, lim: limiter.Limit{Rate: 200, Period: time.Second, Burst: 20}, dur: 2 * time.Second, cap: 2_000_000},
	// 3.5 periods: the flood ends half a period after the last wave or
	// window it fully covers, so edges cannot blur the counts.
	{alg: limiter.SlidingWindow, lim: limiter.Limit{Rate: 100, Period: 500 * time.Millisecond}, dur: 1750 * time.Millisecond, cap: 2_000_000},
	{alg: limiter.FixedWindow, lim: limiter.Limit{Rate: 100, Period: 500 * time.Millisecond}, dur: 1750 * time.Millisecond, cap: 2_000_000, wait: true},
}

func TestPressureOneKey(t *testing.T) {
	s := redistest.Start(t)
	for _, row := range oneKeyRows {
		t.Run(string(row.alg), func(t *testing.T) {
			if row.alg == limiter.TokenBucket {
				e, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				runOneKey(t, e, nil, row)
				return
			}
			// A fresh client and backend per row: a closed breaker and an
			// empty denial cache.
			e, r := newRedisEngine(t, newClient(t, 0, s.Addr()), redislimit.Config{})
			runOneKey(t, e, r, row)
		})
	}
}

// runOneKey floods one key of row's algorithm and checks the bounds, the
// retry times of the denials and, for Redis, that the breaker stayed shut.
func runOneKey(t *testing.T, e *limiter.Engine, r *redislimit.Limiter, row oneKeyRow) {
	pol := &limiter.Rule{Name: "pressure-" + string(row.alg), Algorithm: row.alg, OnRedisError: limiter.FailDeny}
	check := limiter.Check{Rule: pol, Limit: row.lim, Key: "one-key"}
	// Warm up on another key: connections dialed, scripts loaded.
	warm := check
	warm.Key = "warm-up"
	warmUp(t, e, warm)
	var before redislimit.Stats
	if r != nil {
		before = r.Stats()
	}
	if row.wait {
		waitIntoWindow(t, row.lim.Period, 10*time.Millisecond, 100*time.Millisecond)
	}

	// Denials say when one more request can pass: at most one emission
	// interval for a bucket, one period for a window.
	maxRetry := row.lim.Period
	if row.alg == limiter.TokenBucket || row.alg == limiter.GCRA {
		maxRetry = row.lim.Period / time.Duration(row.lim.Rate)
	}
	maxRetry += time.Millisecond

	res := flood(e, []limiter.Check{check}, floodWorkers, row.dur, row.cap, maxRetry)
	if res.errs > 0 {
		t.Fatalf("got %d Decide errors (first: %v), want none", res.errs, res.firstErr)
	}
	sp := res.span
	admitted := count(res.outcomes, isAllowed)
	upper, lower, how := bounds(row.alg, row.lim, sp)
	// A decision the failure mode took (fail closed: a round trip past the
	// 30ms default, which a loaded machine misses) admits nothing and may
	// cost one admission, never add one: the floor leaves them out.
	if failed := count(res.outcomes, outcome.failed); failed > 0 {
		lower = max(0, lower-float64(failed))
		how += fmt.Sprintf(", less %d decisions by the failure mode", failed)
	}
	den := res.denials[0]
	var opens uint64
	if r != nil {
		opens = r.Stats().BreakerOpens - before.BreakerOpens
	}
	t.Logf("%s %s, %d workers: admitted %d, bound %.1f, floor %.0f (%s); %d requests over %s; longest retry %s (want ≤ %s); "+
		"breaker opened %d times; %d decisions by the failure mode; reasons %v",
		row.alg, row.lim, floodWorkers, admitted, upper, lower, how, res.requests, sp.outer().Round(time.Millisecond),
		den.longest, maxRetry, opens, count(res.outcomes, outcome.failed), res.reasonCounts())

	if float64(res.requests) < 3*upper {
		t.Fatalf("sent %d requests for a bound of %.0f: want at least 3×, or the limit was not saturated (machine too slow: lower the rate)", res.requests, upper)
	}
	if float64(admitted) > upper {
		t.Errorf("admitted %d, want at most %.1f (%s)", admitted, upper, how)
	}
	if float64(admitted) < lower {
		t.Errorf("admitted %d, want at least %.0f (%s)", admitted, lower, how)
	}
	switch row.alg {
	case limiter.SlidingWindow:
		if most := maxInSlidingWindow(res.outcomes, row.lim.Period); most > int(row.lim.Rate) {
			t.Errorf("admitted %d within one window of %s, want at most %d", most, row.lim.Period, row.lim.Rate)
		}
	case limiter.FixedWindow:
		for w, n := range perFixedWindow(res.outcomes, row.lim.Period) {
			if n > int(row.lim.Rate) {
				t.Errorf("admitted %d in the window starting %s, want at most %d", n, time.Unix(0, w*row.lim.Period.Nanoseconds()).Format("15:04:05.000"), row.lim.Rate)
			}
		}
	}
	if den.over > 0 {
		t.Errorf("got %d denials with a retry above %s (longest %s), want none: one more request can pass by then", den.over, maxRetry, den.longest)
	}
	if opens > 0 {
		t.Errorf("circuit breaker opened %d times with a healthy Redis, want 0", opens)
	}
}

// The two-policy rows flood a route with a per-second policy and an hourly
// quota, both of one algorithm, with failure mode deny (a Redis failure
// cannot turn into admissions here; it shows as a failed decision).
//
// 4/s over 1.1s admits 8 (gcra: burst 4 + one per 250ms; sliding window:
// waves at 0 and 1s; fixed window: the flood starts early in a second, so
// it touches two windows), so the hourly quota of 10 is never used up:
// then no request may be denied by it, its usage must equal the admitted
// count exactly, and a request must pass again as soon as the per-second
// limit allows.
var (
	perSecond = limiter.Limit{Rate: 4, Period: time.Second, Burst: 4}
	perHour   = limiter.Limit{Rate: 10, Period: time.Hour, Burst: 10}
)

const (
	twoPolicyFlood = 1100 * time.Millisecond
	// twoPolicyTimeout is the decision deadline of the two-policy rows:
	// generous, so that only the refund race can make them fail.
	twoPolicyTimeout = 500 * time.Millisecond
)

func TestPressureTwoPolicies(t *testing.T) {
	s := redistest.Start(t)
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.FixedWindow, limiter.SlidingWindow} {
		t.Run(string(alg), func(t *testing.T) {
			e, r := newRedisEngine(t, newClient(t, twoPolicyTimeout, s.Addr()), redislimit.Config{Timeout: twoPolicyTimeout})
			runTwoPolicies(t, e, r, alg)
		})
	}
}

func runTwoPolicies(t *testing.T, e *limiter.Engine, r *redislimit.Limiter, alg limiter.Algorithm) {
	rps := &limiter.Rule{Name: "pressure-rps-" + string(alg), Algorithm: alg, OnRedisError: limiter.FailDeny}
	hourly := &limiter.Rule{Name: "pressure-hourly-" + string(alg), Algorithm: alg, OnRedisError: limiter.FailDeny}
	const key = "tenant"
	checks := []limiter.Check{{Rule: rps, Limit: perSecond, Key: key}, {Rule: hourly, Limit: perHour, Key: key}}
	warm := []limiter.Check{{Rule: rps, Limit: perSecond, Key: "warm-up"}, {Rule: hourly, Limit: perHour, Key: "warm-up"}}
	warmUp(t, e, warm...)
	before := r.Stats()
	if alg == limiter.FixedWindow {
		clocktest.WaitPastHourEdge(10 * time.Second)
		waitIntoWindow(t, perSecond.Period, 10*time.Millisecond, 100*time.Millisecond)
	}

	res := flood(e, checks, floodWorkers, twoPolicyFlood, 2_000_000, 0)
	if res.errs > 0 {
		t.Fatalf("got %d Decide errors (first: %v), want none", res.errs, res.firstErr)
	}
	sp := res.span
	admitted := count(res.outcomes, isAllowed)
	upper, lower, how := bounds(alg, perSecond, sp)
	upper, lower = min(upper, float64(perHour.Rate)), min(lower, float64(perHour.Rate))
	hourlyDenied, hourlyRetry := res.denials[1].n, res.denials[1].longest
	failed := count(res.outcomes, outcome.failed)

	// The hourly policy alone, once: its usage is what was admitted, plus
	// this request.
	probe := decideOnce(t, e, checks[1])
	wantRemaining := perHour.Rate - int64(admitted) - 1
	t.Logf("%s: 4/s + 10/h, %d workers, %s: admitted %d, bound %.0f, floor %.0f (per-second: %s); %d requests; hourly denied %d (longest retry %s); failed %d; "+
		"hourly alone afterwards: allowed=%v remaining %d (want %d) retry %s reason %s; breaker opened %d times; reasons %v",
		alg, floodWorkers, sp.outer().Round(time.Millisecond), admitted, upper, lower, how, res.requests, hourlyDenied, hourlyRetry.Round(time.Second), failed,
		probe.Allowed, probe.Decisions[0].Remaining, max(0, wantRemaining), probe.Decisions[0].RetryAfter.Round(time.Second), probe.Decisions[0].Reason.String(),
		r.Stats().BreakerOpens-before.BreakerOpens, res.reasonCounts())

	if float64(admitted) > upper {
		t.Errorf("admitted %d, want at most %.0f", admitted, upper)
	}
	if float64(admitted) < lower {
		t.Errorf("admitted %d, want at least %.0f", admitted, lower)
	}
	if failed > 0 {
		t.Errorf("got %d decisions taken by a failure mode with a healthy Redis, want 0", failed)
	}
	if admitted < int(perHour.Rate) && hourlyDenied > 0 {
		t.Errorf("the hourly quota denied %d requests (retry up to %s) although only %d of its %d were admitted: want 0",
			hourlyDenied, hourlyRetry.Round(time.Second), admitted, perHour.Rate)
	}
	if wantRemaining >= 0 {
		if !probe.Allowed || probe.Decisions[0].Remaining != wantRemaining {
			t.Errorf("hourly policy after the flood: got allowed=%v remaining %d (retry %s), want allowed with remaining %d (10 - %d admitted - this one)",
				probe.Allowed, probe.Decisions[0].Remaining, probe.Decisions[0].RetryAfter.Round(time.Second), wantRemaining, admitted)
		}
	} else if probe.Allowed {
		t.Errorf("hourly policy after %d admitted: got allowed, want denied (quota used up)", admitted)
	}
	if wantRemaining > 0 {
		checkNoLockout(t, e, checks)
	}
}

// checkNoLockout asks until the per-second limit lets a request through
// (within a few seconds): the hourly quota, not used up, must not deny it.
func checkNoLockout(t *testing.T, e *limiter.Engine, checks []limiter.Check) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for tries := 1; ; tries++ {
		v := decideOnce(t, e, checks...)
		switch {
		case v.Allowed:
			t.Logf("no lockout: admitted again after %d tries", tries)
			return
		case deniedBy(v, 1):
			d := v.Decisions[1]
			t.Errorf("lockout: the hourly quota (not used up) denied a request with retry %s (reason %s), want it admitted once the per-second limit allows",
				d.RetryAfter.Round(time.Second), d.Reason.String())
			return
		case time.Now().After(deadline):
			t.Errorf("still denied by the per-second policy after 3s (retry %s, reason %s), want admitted within 1s",
				v.Decisions[0].RetryAfter, v.Decisions[0].Reason.String())
			return
		}
		// Wait for the limit's own clock: it said when to come back.
		<-time.After(min(v.Decisions[0].RetryAfter, time.Second) + time.Millisecond)
	}
}

// TestPressureCluster runs the one-key and two-policy floods of the Redis
// algorithms on a 3-master Redis Cluster: the two policies' keys sit in
// different slots (most likely on different nodes), so one request's
// pipeline is split across nodes.
func TestPressureCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	for _, row := range oneKeyRows {
		if !row.alg.Shared() {
			continue
		}
		t.Run("one_key/"+string(row.alg), func(t *testing.T) {
			e, r := newRedisEngine(t, newClient(t, 0, cl.Addrs()...), redislimit.Config{})
			runOneKey(t, e, r, row)
		})
	}
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.FixedWindow, limiter.SlidingWindow} {
		t.Run("two_policies/"+string(alg), func(t *testing.T) {
			e, r := newRedisEngine(t, newClient(t, twoPolicyTimeout, cl.Addrs()...), redislimit.Config{Timeout: twoPolicyTimeout})
			runTwoPolicies(t, e, r, alg)
		})
	}
}
