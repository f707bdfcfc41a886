package limiter

import (
	"context"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestLocalTokenBucketAtFixedInstants(t *testing.T) {
	lim := Limit{Rate: 2, Period: time.Second, Burst: 3} // one token every 500ms
	tests := []struct {
		name      string
		t         time.Duration
		cost      int64
		ok        bool
		remaining int64
		retry     time.Duration
		reason    Reason
	}{
		{"burst 1", 0, 1, true, 2, 0, ReasonNone},
		{"burst 2", 0, 1, true, 1, 0, ReasonNone},
		{"burst 3", 0, 1, true, 0, 0, ReasonNone},
		{"empty", 0, 1, false, 0, 500 * time.Millisecond, ReasonLimited},
		{"still empty at 250ms", 250 * time.Millisecond, 1, false, 0, 250 * time.Millisecond, ReasonLimited},
		{"refilled one at 500ms", 500 * time.Millisecond, 1, true, 0, 0, ReasonNone},
		{"cost 2 needs 1s more", 500 * time.Millisecond, 2, false, 0, time.Second, ReasonLimited},
		{"full after long idle", 10 * time.Second, 3, true, 0, 0, ReasonNone},
		{"cost above burst never passes", 20 * time.Second, 4, false, 0, time.Second, ReasonCostTooHigh},
		{"denied cost took nothing", 20 * time.Second, 3, true, 0, 0, ReasonNone},
	}
	l := NewLocal(0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := l.Reserve(at(tt.t), BucketGroup{Policy: "p", Limit: lim}, "k", tt.cost)
			if d.Allowed != tt.ok || d.Remaining != tt.remaining || d.RetryAfter != tt.retry || d.Reason != tt.reason {
				t.Fatalf("got allowed=%v remaining=%d retry=%v reason=%v, want %v %d %v %v",
					d.Allowed, d.Remaining, d.RetryAfter, d.Reason, tt.ok, tt.remaining, tt.retry, tt.reason)
			}
		})
	}
}

func TestLocalRateZeroDeniesAll(t *testing.T) {
	l := NewLocal(0)
	lim := Limit{Rate: 0, Period: time.Minute}
	for i := range 3 {
		d, undo := l.Reserve(at(time.Duration(i)*time.Hour), BucketGroup{Policy: "closed", Limit: lim}, "k", 1)
		if d.Allowed || d.Reason != ReasonDenyAll || undo != nil {
			t.Fatalf("call %d: got allowed=%v reason=%v, want denied with ReasonDenyAll", i, d.Allowed, d.Reason)
		}
		if d.RetryAfter != time.Minute {
			t.Fatalf("got retry %v, want %v", d.RetryAfter, time.Minute)
		}
	}
	if n := l.Keys(BucketGroup{Policy: "closed", Limit: lim}); n != 0 {
		t.Fatalf("got %d buckets for a deny-all policy, want 0", n)
	}
}

func TestLocalUndoGivesTokensBack(t *testing.T) {
	l := NewLocal(0)
	lim := Limit{Rate: 1, Period: time.Minute, Burst: 2}
	d, undo := l.Reserve(t0, BucketGroup{Policy: "p", Limit: lim}, "k", 2)
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("got allowed=%v remaining=%d, want allowed with 0 left", d.Allowed, d.Remaining)
	}
	undo.Release(t.Context())
	d, _ = l.Reserve(t0, BucketGroup{Policy: "p", Limit: lim}, "k", 1)
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after undo got allowed=%v remaining=%d, want allowed with 1 left", d.Allowed, d.Remaining)
	}
}

func TestLocalIdleExpiry(t *testing.T) {
	l := NewLocal(0)
	lim := Limit{Rate: 10, Period: time.Second, Burst: 10} // full again 1s after last use
	for i := range 100 {
		l.Reserve(t0, BucketGroup{Policy: "p", Limit: lim}, fmt.Sprint("k", i), 1)
	}
	if got := l.Keys(BucketGroup{Policy: "p", Limit: lim}); got != 100 {
		t.Fatalf("got %d keys, want 100", got)
	}
	// Every shard that takes a new key after the idle time sweeps its idle buckets.
	for i := range 1000 {
		l.Reserve(at(5*time.Second), BucketGroup{Policy: "p", Limit: lim}, fmt.Sprint("fresh", i), 1)
	}
	if got := l.Keys(BucketGroup{Policy: "p", Limit: lim}); got > 1000+10 {
		t.Fatalf("got %d keys after idle expiry, want the idle ones (mostly) gone: <= 1010", got)
	}
	for i := range 100 { // an expired bucket comes back full
		d, _ := l.Reserve(at(5*time.Second), BucketGroup{Policy: "p", Limit: lim}, fmt.Sprint("k", i), 10)
		if !d.Allowed {
			t.Fatalf("key k%d: got denied, want a full bucket after idling", i)
		}
	}
}

func TestLocalHardCapOnKeys(t *testing.T) {
	const maxKeys = 640
	l := NewLocal(maxKeys)
	lim := Limit{Rate: 1, Period: time.Hour, Burst: 1} // buckets stay "active" for an hour
	for i := range 20 * maxKeys {
		l.Reserve(at(time.Duration(i)*time.Millisecond), BucketGroup{Policy: "p", Limit: lim}, fmt.Sprint("random-", i), 1)
	}
	if got := l.Keys(BucketGroup{Policy: "p", Limit: lim}); got > maxKeys {
		t.Fatalf("got %d keys, want at most %d", got, maxKeys)
	}
}

func TestLocalBucketsSurviveOnlyUnchangedLimits(t *testing.T) {
	l := NewLocal(0)
	old := Limit{Rate: 1, Period: time.Minute, Burst: 1}
	if d, _ := l.Reserve(t0, BucketGroup{Policy: "p", Limit: old}, "k", 1); !d.Allowed {
		t.Fatal("got first request denied, want allowed")
	}
	if d, _ := l.Reserve(t0, BucketGroup{Policy: "p", Limit: old}, "k", 1); d.Allowed {
		t.Fatal("got second request allowed, want denied: same limit keeps state")
	}
	changed := Limit{Rate: 5, Period: time.Minute, Burst: 5}
	if d, _ := l.Reserve(t0, BucketGroup{Policy: "p", Limit: changed}, "k", 1); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("changed limit: got allowed=%v remaining=%d, want allowed with 4 left", d.Allowed, d.Remaining)
	}
	l.Retain(func(g BucketGroup) bool { return g.Limit == changed })
	if l.Keys(BucketGroup{Policy: "p", Limit: old}) != 0 || l.Keys(BucketGroup{Policy: "p", Limit: changed}) != 1 {
		t.Fatalf("after Retain got old=%d changed=%d keys, want 0 and 1", l.Keys(BucketGroup{Policy: "p", Limit: old}), l.Keys(BucketGroup{Policy: "p", Limit: changed}))
	}
}

func TestEngineDeniedRequestConsumesNothingElsewhere(t *testing.T) {
	now := t0
	e, err := NewEngine(func() time.Time { return now }, NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	hourly := &Rule{Name: "hourly"}
	strict := &Rule{Name: "strict"}
	checks := []Check{
		{Rule: hourly, Limit: Limit{Rate: 100, Period: time.Hour}, Key: "tenant"},
		{Rule: strict, Limit: Limit{Rate: 1, Period: time.Minute}, Key: "tenant"},
	}
	allowed := 0
	for range 10 {
		v, err := e.Decide(context.Background(), checks)
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			allowed++
		} else if i, denied := v.DeniedBy(); !denied || i != 1 {
			t.Fatalf("got denied by check %d (%v), want 1 (strict)", i, denied)
		} else if got, want := v.Decisions[0].Remaining, int64(100-allowed); got != want {
			t.Fatalf("denied verdict shows hourly remaining %d, want %d (its token went back)", got, want)
		}
	}
	if allowed != 1 {
		t.Fatalf("got %d allowed, want 1", allowed)
	}
	d, _ := e.local.Reserve(now, BucketGroup{Policy: "hourly", Limit: checks[0].Limit}, "tenant", 1)
	if want := int64(100 - allowed - 1); d.Remaining != want {
		t.Fatalf("hourly remaining got %d, want %d: denied requests must not consume it", d.Remaining, want)
	}
}

func TestEngineSharedWithoutBackend(t *testing.T) {
	e, _ := NewEngine(time.Now, NewLocal(0), nil)
	_, err := e.Decide(context.Background(), []Check{{Rule: &Rule{Name: "g", Algorithm: GCRA}, Limit: Limit{Rate: 1, Period: time.Second}}})
	if err != ErrNoSharedBackend {
		t.Fatalf("got %v, want ErrNoSharedBackend", err)
	}
}

func TestVerdictDeciding(t *testing.T) {
	v := Verdict{Allowed: true, Decisions: []Decision{
		{Policy: "a", Allowed: true, Remaining: 9},
		{Policy: "b", Allowed: true, Remaining: 2},
		{Policy: "c", Allowed: true, Remaining: 5},
	}}
	if d, ok := v.Deciding(); !ok || d.Policy != "b" {
		t.Fatalf("got %q, want the most restrictive policy b", d.Policy)
	}
	v = DeniedBy(2, append(v.Decisions[:2:2], Decision{Policy: "c", Reason: ReasonUnavailable}))
	if d, _ := v.Deciding(); d.Policy != "c" || !v.Unavailable() {
		t.Fatalf("got %q unavailable=%v, want c and unavailable", d.Policy, v.Unavailable())
	}
}

// askedBackend is a downBackend that counts the requests it is asked.
type askedBackend struct {
	downBackend
	asked *int
}

func (b askedBackend) Decide(ctx context.Context, checks []Check, fallback Fallback) ([]Decision, Settler) {
	*b.asked++
	return b.downBackend.Decide(ctx, checks, fallback)
}

// When local policy k denies, the policies after it (and every shared one,
// asked after the local ones) are reported as not asked, with their policy
// and limit, and none of them is charged; those before it get their token
// back and report it. Decide (its all-local fast path) and Reserve alike.
func TestEngineLocalDenialLeavesLaterUnasked(t *testing.T) {
	ctx := context.Background()
	lim := Limit{Rate: 10, Period: time.Hour, Burst: 10}
	type decideFunc func(e *Engine, checks []Check) Verdict
	decide := func(e *Engine, checks []Check) Verdict {
		v, err := e.Decide(ctx, checks)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	reserve := func(e *Engine, checks []Check) Verdict {
		v, res, err := e.Reserve(ctx, checks)
		if err != nil {
			t.Fatal(err)
		}
		if res != nil {
			t.Fatal("got a reservation for a denied request")
		}
		return v
	}
	for _, tt := range []struct {
		name   string
		n, k   int
		shared int // index of a shared check, -1 for none
		decide decideFunc
	}{
		{"Decide first of 4 denies", 4, 0, -1, decide},
		{"Decide third of 4 denies", 4, 2, -1, decide},
		{"Decide last of 8 denies", 8, 7, -1, decide},
		{"Reserve second of 4 denies", 4, 1, -1, reserve},
		{"Reserve with a shared check before the denial", 4, 2, 0, reserve},
		{"Reserve with a shared check after the denial", 4, 1, 3, reserve},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			e, err := NewEngine(func() time.Time { return t0 }, NewLocal(0), askedBackend{asked: &asked})
			if err != nil {
				t.Fatal(err)
			}
			checks := make([]Check, tt.n)
			for i := range checks {
				rule := &Rule{Name: fmt.Sprintf("p%d", i)}
				if i == tt.shared {
					rule.Algorithm, rule.OnRedisError = GCRA, FailLocal
				}
				checks[i] = Check{Rule: rule, Limit: lim, Key: "k"}
			}
			// Empty policy k's bucket: it denies the next request.
			kg := checks[tt.k].group()
			if d, _ := e.local.Reserve(t0, kg, "k", lim.Quota()); !d.Allowed {
				t.Fatal("could not empty the denying policy's bucket")
			}
			v := tt.decide(e, checks)
			if i, denied := v.DeniedBy(); v.Allowed || !denied || i != tt.k {
				t.Fatalf("got allowed=%v denied by %d (%v), want denied by %d", v.Allowed, i, denied, tt.k)
			}
			if asked != 0 {
				t.Fatalf("backend asked %d times, want 0: a local denial stops the request before Redis", asked)
			}
			for i, d := range v.Decisions {
				if d.Policy != checks[i].Rule.Name || d.Limit != lim {
					t.Fatalf("decision %d: got policy %q limit %s, want %q %s", i, d.Policy, d.Limit, checks[i].Rule.Name, lim)
				}
				wantNotAsked := i > tt.k || i == tt.shared
				if got := d.Reason == ReasonNotAsked; got != wantNotAsked {
					t.Fatalf("decision %d: got reason %s, want not asked = %v", i, d.Reason, wantNotAsked)
				}
				if i < tt.k && i != tt.shared && (!d.Allowed || d.Remaining != lim.Quota()) {
					t.Fatalf("decision %d: got allowed=%v remaining %d, want allowed with %d (its token went back)", i, d.Allowed, d.Remaining, lim.Quota())
				}
			}
			for i, d := range e.Peek(ctx, checks) {
				if i != tt.k && i != tt.shared && d.Remaining != lim.Quota() {
					t.Fatalf("policy %d: got %d remaining, want %d: a denied request charges nothing", i, d.Remaining, lim.Quota())
				}
			}
		})
	}
}

// Deciding names the check that denied; for an admitted request the one
// with the fewest remaining, the first of them on a tie, never a shadow
// policy's (however few it has left); none when only shadow ones remain.
func TestVerdictDecidingTiesAndShadow(t *testing.T) {
	for _, tt := range []struct {
		name string
		v    Verdict
		want string // "" for none
	}{
		{"tie goes to the first", Verdict{Allowed: true, Decisions: []Decision{
			{Policy: "a", Allowed: true, Remaining: 5},
			{Policy: "b", Allowed: true, Remaining: 3},
			{Policy: "c", Allowed: true, Remaining: 3},
		}}, "b"},
		{"shadow with fewer never decides", Verdict{Allowed: true, Decisions: []Decision{
			{Policy: "a", Allowed: true, Remaining: 5},
			{Policy: "s", Allowed: true, Remaining: 0, Shadow: true},
			{Policy: "b", Allowed: true, Remaining: 7},
		}}, "a"},
		{"shadow first, tie after it", Verdict{Allowed: true, Decisions: []Decision{
			{Policy: "s", Allowed: true, Remaining: 1, Shadow: true},
			{Policy: "a", Allowed: true, Remaining: 4},
			{Policy: "b", Allowed: true, Remaining: 4},
		}}, "a"},
		{"only shadow", Verdict{Allowed: true, Decisions: []Decision{
			{Policy: "s", Allowed: true, Remaining: 1, Shadow: true},
		}}, ""},
		{"no decisions", Verdict{Allowed: true}, ""},
		{"the denial decides over fewer remaining", DeniedBy(1, []Decision{
			{Policy: "a", Allowed: true, Remaining: 0},
			{Policy: "b", Reason: ReasonLimited, Remaining: 2},
			{Policy: "c", Reason: ReasonNotAsked},
		}), "b"},
		{"a shadow denial named by DeniedBy decides", DeniedBy(0, []Decision{
			{Policy: "s", Reason: ReasonLimited, Shadow: true},
			{Policy: "a", Allowed: true, Remaining: 1},
		}), "s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := tt.v.Deciding()
			if ok != (tt.want != "") || d.Policy != tt.want {
				t.Fatalf("got %q (%v), want %q", d.Policy, ok, tt.want)
			}
		})
	}
}
