package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/redis/go-redis/v9"
)

// A reservation whose reply comes after the decision's deadline is given
// back: Redis ran the script and recorded the tokens, but the request was
// answered by its failure mode (503 for deny), so no one will settle them.
// The reply is held by a proxy for longer than the timeout, as a starved
// instance reads it too late; Redis must end up holding only what the
// admitted reservation took.
func TestLateReplyGivesBackWhatItReserved(t *testing.T) {
	r, e, p, direct, rule, check := lateSetup(t)

	v, held, err := e.Reserve(context.Background(), []limiter.Check{check})
	if err != nil || !v.Allowed || held == nil {
		t.Fatalf("first reservation: got %+v, %v, %v; want admitted", v, held, err)
	}
	p.SetDelay(4 * lateTimeout) // replies now come after the deadline, within timeout + cooldown/2
	v, late, err := e.Reserve(context.Background(), []limiter.Check{check})
	p.SetDelay(0)
	if err != nil || v.Allowed || late != nil || v.Decisions[0].Reason != limiter.ReasonUnavailable {
		t.Fatalf("late reservation: got %+v, %v, %v; want denied as unavailable, nothing held", v, late, err)
	}
	// The give-back runs when the late reply is in: wait for it (bounded).
	for deadline := time.Now().Add(5 * time.Second); r.Stats().Refunds+r.Stats().RefundErrors == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no give-back within 5s of the late reply (stats %+v)", r.Stats())
		}
		<-time.After(5 * time.Millisecond) // polling a counter: the give-back has no event to wait on
	}
	base := redisBaseKey(rule.Name, digestKey(check.Key))
	if got := redisGetInt(t, direct, base+fixedSuffix); got != check.Cost {
		t.Fatalf("redis holds %d tokens, want %d (the admitted reservation's only)", got, check.Cost)
	}
	if st := r.Stats(); st.RefundErrors != 0 {
		t.Fatalf("got %d refund errors, want 0", st.RefundErrors)
	}
}

// A settlement whose reply comes after the decision's deadline still
// counts: an adjustment moves by a delta and is never retried, so it waits
// for its reply as long as a late reservation does, and Redis ends up
// holding what the request used.
func TestLateSettlementApplies(t *testing.T) {
	r, e, p, direct, rule, check := lateSetup(t)

	v, held, err := e.Reserve(context.Background(), []limiter.Check{check})
	if err != nil || !v.Allowed || held == nil {
		t.Fatalf("reservation: got %+v, %v, %v; want admitted", v, held, err)
	}
	p.SetDelay(4 * lateTimeout)
	err = held.Settle(context.Background(), []int64{208})
	p.SetDelay(0)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if st := r.Stats(); st.Refunds != 1 || st.RefundErrors != 0 {
		t.Fatalf("got %d refunds and %d refund errors, want 1 and 0", st.Refunds, st.RefundErrors)
	}
	base := redisBaseKey(rule.Name, digestKey(check.Key))
	if got := redisGetInt(t, direct, base+fixedSuffix); got != 208 {
		t.Fatalf("redis holds %d tokens, want 208 (what the request used)", got)
	}
}

// The direct check that decides whether timeouts were Redis's (verify) has
// breaker_cooldown to be answered from when it is sent: the wait for a
// round-trip slot before it, which a flood holding every slot makes long,
// is this instance's queue (slots are few with gathering off). Here the
// only slot is held for most of the cooldown and Redis answers in well
// under it: the breaker must stay shut.
func TestVerifyDeadlineStartsAfterTheSlot(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.StartDelayProxy(t, s.Addr())
	const cooldown = time.Second
	r := newTestRedis(t, newTestClient(t, cooldown, p.Addr()), Config{Timeout: 50 * time.Millisecond, BreakerCooldown: cooldown, MaxInFlight: 1, Pipelines: -1})
	if err := r.single.cl().Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	release, err := r.slots.acquire(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(cooldown * 4 / 10)
	r.verify(r.single, "some-key")
	<-time.After(cooldown * 8 / 10) // the slot held by a round trip of the flood, as long as that
	release()
	for deadline := time.Now().Add(5 * time.Second); r.single.verifying.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("verify still running after 5s")
		}
		<-time.After(5 * time.Millisecond) // polling a flag: verify has no event to wait on
	}
	if st := r.Stats(); st.BreakerOpens != 0 {
		t.Fatalf("breaker opened %d times by a Redis answering in %s, want 0", st.BreakerOpens, cooldown*4/10)
	}
}

// lateTimeout is the late tests' Redis deadline: one a loaded machine meets
// when the proxy holds nothing; their replies are held four times as long,
// within lateAllowance.
const lateTimeout = 200 * time.Millisecond

// lateSetup is the late tests' limiter, talking to Redis through a delaying
// proxy, with a direct client to read what Redis holds, and an llm-sized
// token check on a daily window away from its edge.
func lateSetup(t *testing.T) (*Limiter, *limiter.Engine, *redistest.DelayProxy, redis.UniversalClient, *limiter.Rule, limiter.Check) {
	t.Helper()
	s := redistest.Start(t)
	p := redistest.StartDelayProxy(t, s.Addr())
	r := newTestRedis(t, newTestClient(t, lateTimeout, p.Addr()), Config{Timeout: lateTimeout, BreakerCooldown: 4 * time.Second})
	e := newTestEngine(t, r)
	rule := &limiter.Rule{Name: "daily-tokens", Algorithm: limiter.FixedWindow, OnRedisError: limiter.FailDeny}
	check := limiter.Check{Rule: rule, Limit: limiter.Limit{Rate: 5000, Period: 24 * time.Hour}, Key: "acme", Cost: 308}
	direct := newTestClient(t, time.Second, s.Addr())
	avoidWindowEdge(t, direct, 24*time.Hour, 10*time.Second)
	return r, e, p, direct, rule, check
}
