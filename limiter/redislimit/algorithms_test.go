package redislimit

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// These tests drive each shared algorithm against a real redis-server. Time
// is Redis's: where a window must pass, the test waits until Redis's TIME
// has reached the instant, bounded.

func TestGCRABurstThenDenyThenAdmit(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	// 10 per second with bursts of 3: one token every 100ms.
	chk := limiter.Check{Rule: policy("gcra", limiter.GCRA), Limit: limiter.Limit{Rate: 10, Period: time.Second, Burst: 3}, Key: "client-1"}

	for i, wantRemaining := range []int64{2, 1, 0} {
		d := decideOne(t, r, chk)
		if !d.Allowed || d.Remaining != wantRemaining {
			t.Fatalf("call %d: got allowed=%v remaining=%d, want allowed with remaining %d", i+1, d.Allowed, d.Remaining, wantRemaining)
		}
	}
	denied := decideOne(t, r, chk)
	afterDenial := redisNow(t, c)
	if denied.Allowed || denied.Reason != limiter.ReasonLimited {
		t.Fatalf("call 4: got allowed=%v reason=%d, want denied with ReasonLimited", denied.Allowed, denied.Reason)
	}
	if denied.RetryAfter <= 0 || denied.RetryAfter > 100*time.Millisecond {
		t.Fatalf("call 4: got retry after %s, want in (0, 100ms]", denied.RetryAfter)
	}
	again := decideOne(t, r, chk)
	if again.Allowed || again.Reason != limiter.ReasonDenialCached {
		t.Fatalf("call 5: got allowed=%v reason=%d, want denied from the denial cache", again.Allowed, again.Reason)
	}

	waitRedisTime(t, c, afterDenial.Add(denied.RetryAfter))
	if d := decideOne(t, r, chk); !d.Allowed {
		t.Fatalf("after retry-after: got denied (reason %d, retry %s), want admitted", d.Reason, d.RetryAfter)
	}
}

// The seed lesson's case: a sliding window of 3 rejects the 4th and 5th call
// and admits again once the window has slid. The gateway clock is an hour
// off to show that only Redis's clock counts.
func TestSlidingWindowSeedCase(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	skewed := func() time.Time { return time.Now().Add(-time.Hour) }
	r := newTestRedis(t, c, Config{Clock: skewed})
	const window = 200 * time.Millisecond
	chk := limiter.Check{Rule: policy("login", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 3, Period: window}, Key: "203.0.113.7"}

	before := redisNow(t, c)
	for i := 1; i <= 3; i++ {
		if d := decideOne(t, r, chk); !d.Allowed || d.Remaining != int64(3-i) {
			t.Fatalf("call %d: got allowed=%v remaining=%d, want allowed with remaining %d", i, d.Allowed, d.Remaining, 3-i)
		}
	}
	lastAdmitted := redisNow(t, c)
	// A denial answered from the cache counts its time from when the call
	// that cached it was sent, before Redis decided it, so that it never
	// outlasts Redis's: it may be shorter by that call's round trip (ms on a
	// loaded machine), measured here.
	var cachedBy time.Duration
	for i := 4; i <= 5; i++ {
		sent := time.Now()
		d := decideOne(t, r, chk)
		took := time.Since(sent)
		if d.Allowed {
			t.Fatalf("call %d: got allowed, want denied", i)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > window {
			t.Fatalf("call %d: got retry after %s, want in (0, %s]", i, d.RetryAfter, window)
		}
		least := window - time.Millisecond
		if d.Reason == limiter.ReasonDenialCached {
			least -= cachedBy
		}
		if elapsed := redisNow(t, c).Sub(before); d.RetryAfter < least-elapsed {
			t.Fatalf("call %d (reason %s): got retry after %s, want at least %s (window minus time since the first call, minus %s for a cached denial)",
				i, d.Reason, d.RetryAfter, least-elapsed, cachedBy)
		}
		cachedBy = took
	}

	waitRedisTime(t, c, lastAdmitted.Add(window))
	for i := 1; i <= 3; i++ {
		if d := decideOne(t, r, chk); !d.Allowed {
			t.Fatalf("after the window slid, call %d: got denied (reason %d), want admitted", i, d.Reason)
		}
	}
	if d := decideOne(t, r, chk); d.Allowed {
		t.Fatalf("after the window slid, call 4: got allowed, want denied")
	}
}

func TestSlidingWindowCostAware(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	lim := limiter.Limit{Rate: 10, Period: time.Minute}
	chk := func(cost int64) limiter.Check {
		return limiter.Check{Rule: policy("tokens", limiter.SlidingWindow), Limit: lim, Key: "tenant-a", Cost: cost}
	}
	steps := []struct {
		cost          int64
		wantAllowed   bool
		wantRemaining int64
		wantReason    limiter.Reason
	}{
		{4, true, 6, limiter.ReasonNone},
		{4, true, 2, limiter.ReasonNone},
		{3, false, 2, limiter.ReasonLimited}, // 8+3 > 10
		{2, true, 0, limiter.ReasonNone},     // a cheaper request still fits
		{1, false, 0, limiter.ReasonLimited},
		{11, false, 0, limiter.ReasonCostTooHigh}, // can never fit: Redis is not asked
	}
	for i, st := range steps {
		d := decideOne(t, r, chk(st.cost))
		if d.Allowed != st.wantAllowed || d.Remaining != st.wantRemaining || d.Reason != st.wantReason {
			t.Fatalf("step %d (cost %d): got allowed=%v remaining=%d reason=%d, want %v %d %d",
				i, st.cost, d.Allowed, d.Remaining, d.Reason, st.wantAllowed, st.wantRemaining, st.wantReason)
		}
		if !d.Allowed && st.wantReason == limiter.ReasonLimited && (d.RetryAfter <= 0 || d.RetryAfter > time.Minute) {
			t.Fatalf("step %d: got retry after %s, want in (0, 1m]", i, d.RetryAfter)
		}
	}
	base := redisBaseKey("tokens", digestKey("tenant-a"))
	if got := redisGetInt(t, c, base+slidingSumSuffix); got != 10 {
		t.Fatalf("sum key: got %d, want 10", got)
	}
	if got := c.ZCard(t.Context(), base+slidingLogSuffix).Val(); got != 3 {
		t.Fatalf("log entries: got %d, want 3", got)
	}
}

func TestSlidingWindowRetryAfterCoversCost(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	const window = 300 * time.Millisecond
	chk := func(cost int64) limiter.Check {
		return limiter.Check{Rule: policy("sw", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 4, Period: window}, Key: "k", Cost: cost}
	}
	// Two entries of 2 at distinct instants; a request of 3 needs both gone.
	decideOne(t, r, chk(2))
	first := redisNow(t, c)
	waitRedisTime(t, c, first.Add(50*time.Millisecond))
	decideOne(t, r, chk(2))
	second := redisNow(t, c)
	d := decideOne(t, r, chk(3))
	if d.Allowed {
		t.Fatal("cost 3 with 4 of 4 used: got allowed, want denied")
	}
	// It must wait for the second entry, not just the first.
	if min := second.Add(window).Sub(redisNow(t, c)); d.RetryAfter < min-5*time.Millisecond {
		t.Fatalf("got retry after %s, want at least %s (until the second entry leaves)", d.RetryAfter, min)
	}
	waitRedisTime(t, c, second.Add(window))
	if d := decideOne(t, r, chk(3)); !d.Allowed {
		t.Fatalf("after both entries left: got denied (reason %d), want admitted", d.Reason)
	}
}

func TestFixedWindowCountAndReset(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	const period = 400 * time.Millisecond
	chk := func(cost int64) limiter.Check {
		return limiter.Check{Rule: policy("fw", limiter.FixedWindow), Limit: limiter.Limit{Rate: 5, Period: period}, Key: "k", Cost: cost}
	}
	// Start right after a window boundary so the calls share one window.
	waitWindowStart(t, c, period)

	steps := []struct {
		cost          int64
		wantAllowed   bool
		wantRemaining int64
	}{
		{2, true, 3}, {1, true, 2}, {3, false, 2}, {2, true, 0}, {1, false, 0},
	}
	var last limiter.Decision
	for i, st := range steps {
		d := decideOne(t, r, chk(st.cost))
		if d.Allowed != st.wantAllowed || d.Remaining != st.wantRemaining {
			t.Fatalf("step %d (cost %d): got allowed=%v remaining=%d, want %v %d", i, st.cost, d.Allowed, d.Remaining, st.wantAllowed, st.wantRemaining)
		}
		if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > period || d.RetryAfter != d.ResetAfter) {
			t.Fatalf("step %d: got retry %s reset %s, want equal and in (0, %s]", i, d.RetryAfter, d.ResetAfter, period)
		}
		last = d
	}
	key := redisBaseKey("fw", digestKey("k")) + fixedSuffix
	if got := redisGetInt(t, c, key); got != 5 {
		t.Fatalf("counter: got %d, want 5 (denied requests add nothing)", got)
	}
	now := redisNow(t, c)
	waitRedisTime(t, c, now.Add(last.RetryAfter))
	if d := decideOne(t, r, chk(5)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("next window: got allowed=%v remaining=%d, want the whole quota again", d.Allowed, d.Remaining)
	}
}

// waitWindowStart waits until Redis's clock is in the first quarter of a
// window of period aligned to the Unix epoch.
func waitWindowStart(t testing.TB, c redis.UniversalClient, period time.Duration) {
	t.Helper()
	now := redisNow(t, c)
	into := time.Duration(now.UnixMilli()%period.Milliseconds()) * time.Millisecond
	if into < period/4 {
		return
	}
	waitRedisTime(t, c, now.Add(period-into))
}

func TestGCRACostAware(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	lim := limiter.Limit{Rate: 100, Period: time.Hour, Burst: 100}
	chk := func(cost int64) limiter.Check {
		return limiter.Check{Rule: policy("tpm", limiter.GCRA), Limit: lim, Key: "tenant", Cost: cost}
	}
	steps := []struct {
		cost        int64
		wantAllowed bool
		wantReason  limiter.Reason
	}{
		{60, true, limiter.ReasonNone}, {30, true, limiter.ReasonNone}, {20, false, limiter.ReasonLimited}, {10, true, limiter.ReasonNone},
		{101, false, limiter.ReasonCostTooHigh},
	}
	for i, st := range steps {
		d := decideOne(t, r, chk(st.cost))
		if d.Allowed != st.wantAllowed || d.Reason != st.wantReason {
			t.Fatalf("step %d (cost %d): got allowed=%v reason=%d, want %v %d", i, st.cost, d.Allowed, d.Reason, st.wantAllowed, st.wantReason)
		}
	}
}

func TestDenyAllAndCostTooHighSkipRedis(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	before := redistest.CommandCount(t, s.Addr())
	tests := []struct {
		name string
		chk  limiter.Check
		want limiter.Reason
	}{
		{"rate zero gcra", limiter.Check{Rule: policy("a", limiter.GCRA), Limit: limiter.Limit{Rate: 0, Period: time.Second}, Key: "k"}, limiter.ReasonDenyAll},
		{"rate zero window", limiter.Check{Rule: policy("b", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 0, Period: time.Second}, Key: "k"}, limiter.ReasonDenyAll},
		{"cost above burst", limiter.Check{Rule: policy("c", limiter.GCRA), Limit: limiter.Limit{Rate: 10, Period: time.Second, Burst: 5}, Key: "k", Cost: 6}, limiter.ReasonCostTooHigh},
		{"cost above a window's quota", limiter.Check{Rule: policy("d", limiter.FixedWindow), Limit: limiter.Limit{Rate: 10, Period: time.Second}, Key: "k", Cost: 11}, limiter.ReasonCostTooHigh},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideOne(t, r, tt.chk)
			if d.Allowed || d.Reason != tt.want {
				t.Fatalf("got allowed=%v reason=%d, want denied with reason %d", d.Allowed, d.Reason, tt.want)
			}
			if d.RetryAfter <= 0 {
				t.Fatalf("got retry after %s, want > 0", d.RetryAfter)
			}
		})
	}
	// The INFO call of the first count is itself counted by the second.
	if got := redistest.CommandCount(t, s.Addr()) - before; got > 1 {
		t.Fatalf("redis commands: got %d, want none besides INFO", got-1)
	}
}

// When one check is denied before Redis is asked (rate zero, cost too high,
// denial cache), the others are left unasked: not allowed and without a
// reason, which the proxy renders as "not decided". Nothing is consumed.
func TestUnaskedChecksSayNotAsked(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	fresh := limiter.Check{Rule: policy("fresh", limiter.GCRA), Limit: limiter.Limit{Rate: 10, Period: time.Minute}, Key: "k"}
	over := limiter.Check{Rule: policy("over", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 1, Period: time.Minute}, Key: "k"}
	if d := decideOne(t, r, over); !d.Allowed {
		t.Fatal("first call: got denied, want admitted")
	}
	if d := decideOne(t, r, over); d.Reason != limiter.ReasonLimited {
		t.Fatalf("second call: got reason %d, want ReasonLimited (and a denial cache entry)", d.Reason)
	}
	keysBefore := c.DBSize(t.Context()).Val()

	tests := []struct {
		name       string
		checks     []limiter.Check
		denier     int
		wantReason limiter.Reason
	}{
		{"denial cache after", []limiter.Check{fresh, over}, 1, limiter.ReasonDenialCached},
		{"deny-all after", []limiter.Check{fresh, {Rule: policy("zero", limiter.GCRA), Limit: limiter.Limit{Period: time.Minute}, Key: "k"}}, 1, limiter.ReasonDenyAll},
		{"cost too high first", []limiter.Check{{Rule: policy("big", limiter.FixedWindow), Limit: limiter.Limit{Rate: 2, Period: time.Minute}, Key: "k", Cost: 3}, fresh}, 0, limiter.ReasonCostTooHigh},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, undo := decide(t, r, tt.checks...)
			if undo != nil {
				t.Fatal("got an undo, want none: nothing was taken")
			}
			for i, d := range ds {
				if i == tt.denier {
					if d.Allowed || d.Reason != tt.wantReason {
						t.Fatalf("check %d: got allowed=%v reason %d, want denied with %d", i, d.Allowed, d.Reason, tt.wantReason)
					}
					continue
				}
				if d.Allowed || d.Reason != limiter.ReasonNotAsked || d.Policy != tt.checks[i].Rule.Name {
					t.Fatalf("check %d: got %+v, want unasked (not allowed, ReasonNotAsked, its policy name)", i, d)
				}
			}
		})
	}
	if got := c.DBSize(t.Context()).Val(); got != keysBefore {
		t.Fatalf("keys in redis: got %d, want %d (unasked checks consume nothing)", got, keysBefore)
	}
}
