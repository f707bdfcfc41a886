package limiter

import (
	"context"
	"testing"
	"time"
)

// A reservation settles to the request's real cost: what was reserved beyond
// it comes back, what it cost beyond is taken, past empty if need be.
func TestLocalReservationSettles(t *testing.T) {
	lim := Limit{Rate: 10, Period: 10 * time.Second} // one unit a second, 10 at most
	e, err := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	rule := &Rule{Name: "tokens"}
	remaining := func() int64 {
		t.Helper()
		v, res, err := e.Reserve(context.Background(), []Check{{Rule: rule, Limit: lim, Key: "k", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !v.Allowed {
			return -1
		}
		if err := res.Settle(context.Background(), []int64{0}); err != nil { // a probe that cost nothing
			t.Fatal(err)
		}
		return v.Decisions[0].Remaining + 1
	}

	steps := []struct {
		name    string
		settle  int64 // what the reserved 6 turn out to cost
		wantRem int64 // left afterwards; -1: the next request is refused
	}{
		{"cost less than reserved", 2, 8},
		{"cost exactly what was reserved", 6, 4},
		{"cost nothing (upstream failed)", 0, 10},
		{"cost more than reserved", 9, 1},
		{"cost more than the bucket holds", 14, -1},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			e.local = NewLocal(0) // a full bucket for each row
			v, res, err := e.Reserve(context.Background(), []Check{{Rule: rule, Limit: lim, Key: "k", Cost: 6}})
			if err != nil || !v.Allowed || res == nil {
				t.Fatalf("reserve: got allowed=%v res=%v err=%v, want admitted with a reservation", v.Allowed, res, err)
			}
			if err := res.Settle(context.Background(), []int64{st.settle}); err != nil {
				t.Fatal(err)
			}
			if got := remaining(); got != st.wantRem {
				t.Fatalf("after settling to %d: got %d left, want %d", st.settle, got, st.wantRem)
			}
		})
	}
}

// Settling twice moves from the last settlement, not from the reservation.
func TestLocalReservationSettlesAgain(t *testing.T) {
	lim := Limit{Rate: 100, Period: time.Hour}
	e, _ := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
	rule := &Rule{Name: "tokens"}
	_, res, _ := e.Reserve(context.Background(), []Check{{Rule: rule, Limit: lim, Key: "k", Cost: 50}})
	for _, units := range []int64{20, 70, 10} {
		if err := res.Settle(context.Background(), []int64{units}); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := e.local.Reserve(t0, BucketGroup{Policy: "tokens", Limit: lim}, "k", 1)
	if d.Remaining != 100-10-1 {
		t.Fatalf("got %d left, want %d: the last settlement (10) counts, plus this request", d.Remaining, 100-10-1)
	}
	if err := res.Settle(context.Background(), []int64{1, 2}); err == nil {
		t.Fatal("settling 1 check with 2 costs: got no error, want one")
	}
}
