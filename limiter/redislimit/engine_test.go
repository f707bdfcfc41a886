package redislimit

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// A tenant's hourly quota is not eaten by requests that its per-second limit
// rejected: after a burst of requests mostly denied per second, the quota's
// usage in Redis equals the number of admitted requests exactly.
func TestDeniedRequestConsumesNothingElsewhere(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	runConsumesNothing(t, c)
}

// denyWithin bounds runConsumesNothing's loop, which ends as soon as the
// per-second limit denied 100 requests (in well under a second when idle).
const denyWithin = 10 * time.Second

func runConsumesNothing(t *testing.T, c redis.UniversalClient) {
	for _, hourlyAlg := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.GCRA} {
		for _, hourlyFirst := range []bool{false, true} {
			name := string(hourlyAlg) + "/hourly_first=" + strconv.FormatBool(hourlyFirst)
			t.Run(name, func(t *testing.T) {
				r := newTestRedis(t, c, Config{})
				e := newTestEngine(t, r)
				tenant := "tenant-" + name
				perSecond := limiter.Check{Rule: policy("tenant-rps", limiter.GCRA), Limit: limiter.Limit{Rate: 20, Period: time.Second, Burst: 5}, Key: tenant}
				hourly := limiter.Check{Rule: policy("tenant-hourly", hourlyAlg), Limit: limiter.Limit{Rate: 1000, Period: time.Hour, Burst: 1000}, Key: tenant}
				checks := []limiter.Check{perSecond, hourly}
				deniedIndex := 0
				if hourlyFirst {
					checks, deniedIndex = []limiter.Check{hourly, perSecond}, 1
				}

				if hourlyAlg == limiter.FixedWindow {
					avoidWindowEdge(t, c, time.Hour, denyWithin+time.Second)
				}
				// Until the per-second limit denied many: a count, not a
				// duration, which a loaded machine fills with few requests.
				// The deadline only bounds a limiter that never denies.
				var admitted, denied int64
				start := time.Now()
				deadline := start.Add(denyWithin)
				for i := 0; denied < 100 && i < 1_000_000 && time.Now().Before(deadline); i++ {
					v, err := e.Decide(context.Background(), checks)
					if err != nil {
						t.Fatalf("Decide: %v", err)
					}
					if v.Allowed {
						admitted++
						continue
					}
					denied++
					// A check left unasked (no reason) before the denier must
					// not be taken for it.
					if i, denied := v.DeniedBy(); !denied || i != deniedIndex {
						t.Fatalf("got DeniedBy=%d (%v), want %d (the per-second policy): %+v", i, denied, deniedIndex, v.Decisions)
					}
					if d := v.Decisions[deniedIndex]; d.Allowed || d.Reason == limiter.ReasonNone {
						t.Fatalf("got per-second decision %+v, want it to deny with a reason", d)
					}
					if d := v.Decisions[1-deniedIndex]; d.Reason != limiter.ReasonNone && d.Reason != limiter.ReasonNotAsked {
						t.Fatalf("got hourly decision %+v, want it admitted but not recorded, or not asked", d)
					}
				}
				st := r.Stats()
				// Denied requests take nothing, so nothing is ever given back:
				// no refund can be in flight for another request to trip over.
				if denied < 100 || st.Refunds != 0 {
					t.Fatalf("got %d denied and %d refunds, want the per-second limit to deny many and no refunds", denied, st.Refunds)
				}
				used := hourlyUsage(t, c, hourly)
				t.Logf("%s: admitted %d, denied %d (%d refunds, %d from the denial cache), hourly usage in redis %.3f",
					name, admitted, denied, st.Refunds, st.DenialCacheHits, used)
				if hourlyAlg == limiter.GCRA {
					// GCRA refills while the test runs (1000/h: 0.28 per
					// second), over the time it actually took.
					refilled := float64(hourly.Limit.Rate) * time.Since(start).Seconds() / hourly.Limit.Period.Seconds()
					if used > float64(admitted)+1e-6 || used < float64(admitted)-refilled-1e-6 {
						t.Fatalf("hourly usage: got %.3f, want %d (the admitted requests) less at most %.3f refilled", used, admitted, refilled)
					}
					return
				}
				if used != float64(admitted) {
					t.Fatalf("hourly usage: got %.0f, want %d (the admitted requests, exactly)", used, admitted)
				}
			})
		}
	}
}

// hourlyUsage reads how much of c's quota Redis holds as used.
func hourlyUsage(t *testing.T, rc redis.UniversalClient, c limiter.Check) float64 {
	t.Helper()
	base := redisBaseKey(c.Rule.Name, digestKey(c.Key))
	switch c.Rule.Algorithm {
	case limiter.FixedWindow:
		return float64(redisGetInt(t, rc, base+fixedSuffix))
	case limiter.SlidingWindow:
		sum := redisGetInt(t, rc, base+slidingSumSuffix)
		if n := rc.ZCard(t.Context(), base+slidingLogSuffix).Val(); n != sum {
			t.Fatalf("sliding log: got %d entries, want %d (the sum, all costs 1)", n, sum)
		}
		return float64(sum)
	default:
		tat, err := rc.Get(t.Context(), gcraKeyPrefix+base).Float64()
		if err == redis.Nil {
			return 0
		}
		if err != nil {
			t.Fatalf("GET tat: %v", err)
		}
		now := redisNow(t, rc)
		sinceEpoch := float64(now.UnixMicro())/1e6 - 1483228800 // redis_rate's epoch
		emission := c.Limit.Period.Seconds() / float64(c.Limit.Rate)
		return math.Max(0, tat-sinceEpoch) / emission
	}
}

func TestUndoGivesBackWhatWasTaken(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			chk := limiter.Check{Rule: policy("undo-"+string(alg), alg), Limit: limiter.Limit{Rate: 10, Period: time.Hour}, Key: "k", Cost: 3}
			first := decideOne(t, r, chk)
			ds, undo := decide(t, r, chk)
			if !first.Allowed || !ds[0].Allowed || undo == nil {
				t.Fatalf("got allowed %v, %v and undo %v, want both admitted with an undo", first.Allowed, ds[0].Allowed, undo != nil)
			}
			undo(context.Background())
			after := decideOne(t, r, chk)
			// After the undo only the first request's 3 are used, plus this
			// request's 3.
			if !after.Allowed || after.Remaining != 4 {
				t.Fatalf("after undo: got allowed=%v remaining=%d, want allowed with remaining 4", after.Allowed, after.Remaining)
			}
		})
	}
	if st := r.Stats(); st.Refunds != 3 || st.RefundErrors != 0 {
		t.Fatalf("got %d refunds and %d errors, want 3 and 0", st.Refunds, st.RefundErrors)
	}
}

func TestUndoOfOnlyEntryLeavesNoKey(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		chk := limiter.Check{Rule: policy("only-"+string(alg), alg), Limit: limiter.Limit{Rate: 10, Period: time.Hour}, Key: "k", Cost: 2}
		_, undo := decide(t, r, chk)
		if undo == nil {
			t.Fatalf("%s: got no undo, want one", alg)
		}
		undo(context.Background())
	}
	if keys := c.Keys(t.Context(), "*").Val(); len(keys) != 0 {
		t.Fatalf("after undoing every admission: got keys %q, want none (a refunded key means a full bucket)", keys)
	}
}
