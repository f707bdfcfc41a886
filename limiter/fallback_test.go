package limiter

import (
	"context"
	"testing"
	"time"
)

func TestFallbackLimit(t *testing.T) {
	tests := []struct {
		name  string
		alg   Algorithm
		lim   Limit
		share float64
		want  Limit
	}{
		{"a third of a gcra limit", GCRA, Limit{Rate: 30, Period: time.Minute, Burst: 60}, 0.34, Limit{Rate: 10, Period: time.Minute, Burst: 20}},
		{"gcra without burst uses the rate", GCRA, Limit{Rate: 30, Period: time.Minute}, 0.5, Limit{Rate: 15, Period: time.Minute, Burst: 15}},
		{"windows use the rate as quota", SlidingWindow, Limit{Rate: 100, Period: time.Hour}, 0.29, Limit{Rate: 29, Period: time.Hour, Burst: 29}},
		{"never below one", FixedWindow, Limit{Rate: 2, Period: time.Second}, 0.1, Limit{Rate: 1, Period: time.Second, Burst: 1}},
		{"zero share means the whole limit", GCRA, Limit{Rate: 7, Period: time.Second, Burst: 9}, 0, Limit{Rate: 7, Period: time.Second, Burst: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fallbackLimit(Check{Rule: &Rule{Name: "p", Algorithm: tt.alg, LocalShare: tt.share}, Limit: tt.lim})
			if got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// downBackend is a shared backend whose Redis never answers: every check
// goes to its failure mode, FailLocal ones to the Engine's fallback. The
// checks listed in deny are then refused as FailDeny refuses them.
type downBackend struct{ deny map[int]bool }

func (b downBackend) Decide(_ context.Context, checks []Check, fallback Fallback) ([]Decision, Settler) {
	ds := make([]Decision, len(checks))
	for i, c := range checks {
		switch {
		case b.deny[i]:
			ds[i] = Decision{Policy: c.Rule.Name, Limit: c.Limit, Reason: ReasonUnavailable}
		default:
			ds[i] = fallback(i)
		}
	}
	return ds, nil
}

// The Engine alone keeps the fallback share: what a FailLocal check took
// while Redis was down goes back when another check denies the request,
// and is settled with the request otherwise.
func TestEngineOwnsTheFallbackShare(t *testing.T) {
	ctx := context.Background()
	lim := Limit{Rate: 4, Period: time.Hour, Burst: 4}
	rule := &Rule{Name: "shared", Algorithm: GCRA, OnRedisError: FailLocal, LocalShare: 0.5}
	strict := &Rule{Name: "strict", Algorithm: GCRA, OnRedisError: FailDeny}
	chk := Check{Rule: rule, Limit: lim, Key: "k"}
	share := BucketGroup{Policy: rule.Name, Limit: Limit{Rate: 2, Period: time.Hour, Burst: 2}, Fallback: true, Algorithm: GCRA}
	left := func(l *Local) int64 { return l.Peek(time.Now(), share, "k").Remaining }

	t.Run("denied by another check", func(t *testing.T) {
		l := NewLocal(0)
		e, _ := NewEngine(time.Now, l, downBackend{deny: map[int]bool{1: true}})
		v, res, err := e.Reserve(ctx, []Check{chk, {Rule: strict, Limit: lim, Key: "k"}})
		if i, denied := v.DeniedBy(); err != nil || v.Allowed || res != nil || !denied || i != 1 {
			t.Fatalf("got allowed=%v denied by %d (%v), reservation %v, err %v; want denied by check 1", v.Allowed, i, denied, res, err)
		}
		if d := v.Decisions[0]; d.Reason != ReasonLocalFallback {
			t.Fatalf("check 0: got reason %v, want local_fallback", d.Reason)
		}
		if got := left(l); got != 2 {
			t.Fatalf("fallback share after the denial: got %d left, want 2 (given back)", got)
		}
	})

	t.Run("admitted and settled", func(t *testing.T) {
		l := NewLocal(0)
		e, _ := NewEngine(time.Now, l, downBackend{})
		v, res, err := e.Reserve(ctx, []Check{chk})
		if err != nil || !v.Allowed || res == nil {
			t.Fatalf("got allowed=%v err=%v, want admitted by the fallback share", v.Allowed, err)
		}
		if got := left(l); got != 1 {
			t.Fatalf("fallback share while admitted: got %d left, want 1", got)
		}
		if err := res.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := left(l); got != 2 {
			t.Fatalf("fallback share after Release: got %d left, want 2", got)
		}
		for range 2 {
			if v, _ := e.Decide(ctx, []Check{chk}); !v.Allowed {
				t.Fatal("within the share: got denied, want admitted")
			}
		}
		if v, _ := e.Decide(ctx, []Check{chk}); v.Allowed || v.Decisions[0].Reason != ReasonLocalFallback {
			t.Fatalf("past the share: got allowed=%v reason %v, want denied by the fallback", v.Allowed, v.Decisions[0].Reason)
		}
		if err := e.Reset(ctx, chk); err != ErrNoReset {
			t.Fatalf("Reset: got %v, want ErrNoReset", err)
		}
	})
}

// The zero Verdict names no denying check; DeniedBy builds one that does.
func TestVerdictDeniedBy(t *testing.T) {
	if i, ok := (Verdict{}).DeniedBy(); ok {
		t.Fatalf("zero Verdict: got denied by %d, want none", i)
	}
	if i, ok := (Verdict{Allowed: true}).DeniedBy(); ok {
		t.Fatalf("allowed Verdict: got denied by %d, want none", i)
	}
	v := DeniedBy(0, []Decision{{Policy: "a", Reason: ReasonLimited}})
	if i, ok := v.DeniedBy(); !ok || i != 0 || v.Allowed {
		t.Fatalf("DeniedBy(0): got %d, %v, allowed=%v; want check 0, denied", i, ok, v.Allowed)
	}
	if d, ok := v.Deciding(); !ok || d.Policy != "a" {
		t.Fatalf("Deciding: got %q, %v; want a", d.Policy, ok)
	}
}
