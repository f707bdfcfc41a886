//go:build pressure

package redislimit_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter/redislimit"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// Redis killed, hung (SIGSTOP) and restarted in the middle of a flood of
// 64 workers on one GCRA key, for each failure mode. What docs/redis.md
// promises:
//   - deny: nothing passes that Redis did not count; the outage answers
//     "unavailable" (503).
//   - local: while Redis is down, each instance admits at most its share of
//     the limit.
//   - allow: requests pass while Redis is down, once the outage is known
//     (at once for a refused connection; for a hang, after a direct check
//     went unanswered: until then a timeout denies, it may be overload).
//   - all: enforcement through Redis is back within breaker_cooldown (+
//     slack) after Redis is, and the limit holds again from then on; a
//     healthy Redis before the outage enforces the limit.

// downLimit is the flooded limit: 200/s, burst 20; the local share is half.
var downLimit = limiter.Limit{Rate: 200, Period: time.Second, Burst: 20}

const (
	downShare = 0.5
	// Flood timeline: Redis healthy for downBefore, down for downFor, then
	// back; the flood goes on for downAfter once enforcement must be back
	// (breaker_cooldown + recoverySlack after Redis), and never longer than
	// downFlood in all.
	downBefore = 300 * time.Millisecond
	downFor    = 400 * time.Millisecond
	// hungFor is longer: a hung Redis is only taken for down once it also
	// left a direct check unanswered for breaker_cooldown (a timeout alone
	// may be a starved gateway), about 620ms with the defaults, and the
	// allow row must see requests pass after that.
	hungFor   = time.Second
	downAfter = 500 * time.Millisecond
	downFlood = 3500 * time.Millisecond
	// downRequests bounds the flood's count too. A hot key's denials are
	// answered from the denial cache, and its admissions by merged calls
	// that fold its repeats: a 2-core machine makes over a million
	// decisions a second, and the bound must not end the flood before
	// downAfter is over.
	downRequests = 20_000_000
	// recoverySlack is what enforcement may take beyond the breaker's
	// cooldown after Redis is back: reconnecting on a loaded machine under
	// -race.
	recoverySlack = 300 * time.Millisecond
	// answerSlack bounds the latency of one decision in the window bounds
	// that start at an instant the test chose rather than at a request.
	answerSlack = 50 * time.Millisecond
)

// outage is one way of taking Redis away and giving it back.
type outage struct {
	name string
	// down takes Redis away; up gives it back. For a restart, down does
	// both and up does nothing.
	down, up func(s *redistest.Server)
	// lost is whether Redis forgets the limit's state (no persistence): one
	// extra burst is then allowed, as docs/redis.md says.
	lost bool
	// long is whether the outage lasts (downFor, or hungFor for a hang; a
	// restart lasts only as long as redis-server takes to start).
	long bool
}

var outages = []outage{
	{name: "killed", down: (*redistest.Server).Kill, up: (*redistest.Server).Restart, lost: true, long: true},
	{name: "hung", down: (*redistest.Server).Stop, up: (*redistest.Server).Cont, long: true},
	{name: "restarted", down: (*redistest.Server).Restart, up: func(*redistest.Server) {}, lost: true},
}

func TestPressureRedisDown(t *testing.T) {
	for _, out := range outages {
		for _, mode := range []limiter.FailureMode{limiter.FailAllow, limiter.FailDeny, limiter.FailLocal} {
			t.Run(out.name+"/"+string(mode), func(t *testing.T) {
				runRedisDown(t, out, mode)
			})
		}
	}
}

func runRedisDown(t *testing.T, out outage, mode limiter.FailureMode) {
	s := redistest.Start(t)
	e, r := newRedisEngine(t, newClient(t, 0, s.Addr()), redislimit.Config{})
	pol := &limiter.Rule{Name: "pressure-down", Algorithm: limiter.GCRA, OnRedisError: mode, LocalShare: downShare}
	check := limiter.Check{Rule: pol, Limit: downLimit, Key: "one-key"}
	warm := check
	warm.Key = "warm-up"
	warmUp(t, e, warm)

	var res floodResult
	var wg sync.WaitGroup
	halt := make(chan struct{})
	defer wg.Wait() // the flood ends by itself within downFlood
	wg.Go(func() { res = floodUntil(e, []limiter.Check{check}, floodWorkers, downFlood, halt, downRequests, 0) })
	<-time.After(downBefore) // the outage starts mid-flood, at a chosen time
	downStart := time.Now()
	out.down(s)
	downDone := time.Now()
	if out.long {
		d := downFor
		if out.name == "hung" {
			d = hungFor
		}
		<-time.After(d)
	}
	upStart := time.Now()
	out.up(s)
	back := time.Now()
	// From settled on, enforcement must be back and stay: the breaker shut,
	// no decision answered without asking Redis. A single slow answer may
	// still take the failure mode: that is the timeout working.
	cooldown := redislimit.DefaultBreakerCooldown
	settled := back.Add(cooldown + recoverySlack)
	<-time.After(time.Until(settled))
	atSettled := r.Stats()
	<-time.After(downAfter)
	close(halt)
	wg.Wait()
	atEnd := r.Stats()
	if res.errs > 0 {
		t.Fatalf("got %d Decide errors (first: %v), want none", res.errs, res.firstErr)
	}

	if left := res.span.lastSent.Sub(settled); left < downAfter/2 {
		t.Fatalf("the flood went on only %s after enforcement had to be back (redis took %s to come back, the flood stops after %s or %d requests; it made %d): machine too slow for this test, or too fast for its bound", left, back.Sub(upStart), downFlood, downRequests, res.requests)
	}
	var (
		upAdmitted, downAdmitted, settledAdmitted, admitted int
		downFailed, settledFailed, fallbackAdmitted         int
		lastFailed                                          time.Time
		fallback                                            span
	)
	for _, o := range res.outcomes {
		during := out.long && !o.sentAt().Before(downDone) && !o.recvAt().After(upStart)
		after := !o.sentAt().Before(settled)
		if o.failed() {
			lastFailed = maxTime(lastFailed, o.recvAt())
			switch {
			case during:
				downFailed++
			case after:
				settledFailed++
			}
		}
		if !o.allowed {
			continue
		}
		admitted++
		switch {
		case o.recvAt().Before(downStart):
			upAdmitted++
		case during:
			downAdmitted++
		case after:
			settledAdmitted++
		}
		if o.reason == limiter.ReasonLocalFallback {
			fallbackAdmitted++
			fallback.add(o)
		}
	}

	burst := float64(downLimit.Burst)
	upBound := burst + earned(downLimit, downStart.Sub(res.span.firstSent)) + boundSlack
	// Settled: every decision was made between settled and the last answer;
	// the flood kept asking from settled (plus one answer's latency) to its
	// last request.
	settledUpper := burst + earned(downLimit, res.span.lastRecv.Sub(settled)) + boundSlack
	// A decision the failure mode took after recovery (a round trip past
	// the 30ms default on a loaded machine) may cost one admission, never
	// add one (deny; local's are counted apart): the floor leaves them out.
	settledLower := max(0, math.Floor(lowerFraction*earned(downLimit, res.span.lastSent.Sub(settled)-answerSlack))-float64(settledFailed))
	total := burst + earned(downLimit, res.span.outer()) + boundSlack
	if out.lost {
		total += burst
	}
	local := limiter.Limit{Rate: int64(float64(downLimit.Rate) * downShare), Period: downLimit.Period, Burst: int64(burst * downShare)}
	localBound := float64(local.Burst) + earned(local, upStart.Sub(downDone)) + boundSlack
	fallbackBound := float64(local.Burst) + earned(local, fallback.outer()) + boundSlack

	t.Logf("redis %s for %s, on_redis_error=%s, %d workers, %s: admitted %d of %d requests, bound %.1f (burst %d + %d/s × %s + %d%s); "+
		"before the outage admitted %d, bound %.1f; while down admitted %d (%d decided by the failure mode); "+
		"from %s after redis was back admitted %d, bound %.1f, floor %.0f, failure-mode decisions %d; last failure-mode answer %s after redis was back; "+
		"breaker opened %d times; reasons %v",
		out.name, upStart.Sub(downStart).Round(time.Millisecond), mode, floodWorkers, downLimit, admitted, res.requests, total, downLimit.Burst, downLimit.Rate,
		res.span.outer().Round(time.Millisecond), boundSlack, map[bool]string{true: " + one burst: state lost", false: ""}[out.lost],
		upAdmitted, upBound, downAdmitted, downFailed,
		settled.Sub(back), settledAdmitted, settledUpper, settledLower, settledFailed, sinceOrNever(lastFailed, back),
		r.Stats().BreakerOpens, res.reasonCounts())

	if float64(upAdmitted) > upBound {
		t.Errorf("before the outage (healthy redis): admitted %d, want at most %.1f", upAdmitted, upBound)
	}
	switch mode {
	case limiter.FailDeny:
		if float64(admitted) > total {
			t.Errorf("on_redis_error=deny: admitted %d over the flood, want at most %.1f: nothing passes that redis did not count", admitted, total)
		}
		if out.long && downAdmitted > 0 {
			t.Errorf("on_redis_error=deny: admitted %d while redis was %s, want 0", downAdmitted, out.name)
		}
		if out.long && downFailed == 0 {
			t.Errorf("on_redis_error=deny: no request was refused as unavailable while redis was %s, want 503s", out.name)
		}
	case limiter.FailLocal:
		if out.long && float64(downAdmitted) > localBound {
			t.Errorf("on_redis_error=local: admitted %d while redis was %s, want at most the local share %.1f (%s)", downAdmitted, out.name, localBound, local)
		}
		if out.long && downFailed == 0 {
			t.Errorf("on_redis_error=local: no request was decided by the local share while redis was %s, want all of them", out.name)
		}
		if float64(fallbackAdmitted) > fallbackBound {
			t.Errorf("on_redis_error=local: the local share admitted %d over %s, want at most %.1f", fallbackAdmitted, fallback.outer().Round(time.Millisecond), fallbackBound)
		}
	case limiter.FailAllow:
		if out.long && downAdmitted == 0 {
			t.Errorf("on_redis_error=allow: nothing admitted while redis was %s, want requests to pass", out.name)
		}
	}
	if atSettled.BreakerOpen || atEnd.BreakerOpens != atSettled.BreakerOpens || atEnd.FailFast != atSettled.FailFast {
		t.Errorf("from %s after redis was back: breaker open=%v, then opened %d more times and answered %d decisions without redis "+
			"(%d decisions by the failure mode, the last %s after redis was back), want enforcement back within %s (breaker_cooldown) + %s and kept",
			cooldown+recoverySlack, atSettled.BreakerOpen, atEnd.BreakerOpens-atSettled.BreakerOpens, atEnd.FailFast-atSettled.FailFast,
			settledFailed, sinceOrNever(lastFailed, back), cooldown, recoverySlack)
	}
	if float64(settledAdmitted) > settledUpper {
		t.Errorf("after recovery: admitted %d, want at most %.1f (burst + rate over %s)", settledAdmitted, settledUpper, res.span.lastRecv.Sub(settled).Round(time.Millisecond))
	}
	if float64(settledAdmitted) < settledLower {
		t.Errorf("after recovery: admitted %d, want at least %.0f (95%% of the rate over %s, less %d decisions by the failure mode)",
			settledAdmitted, settledLower, (res.span.lastSent.Sub(settled) - answerSlack).Round(time.Millisecond), settledFailed)
	}
}

// sinceOrNever renders how long after from t was, or "never" for the zero
// time (or a time before from).
func sinceOrNever(t, from time.Time) string {
	if t.IsZero() || t.Before(from) {
		return "never"
	}
	return fmt.Sprint(t.Sub(from).Round(time.Millisecond))
}
