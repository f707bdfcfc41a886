package limiter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// At most Limit.Rate requests of one key hold a slot at once, however many
// arrive together; each Settle gives exactly one back, and a key with no
// request in flight is forgotten.
func TestConcurrencySlotsHoldTheLimit(t *testing.T) {
	e, err := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	rule := &Rule{Name: "inflight", Algorithm: Concurrency}
	lim := Limit{Rate: 4, Period: 30 * time.Second, Burst: 4}
	checks := []Check{{Rule: rule, Limit: lim, Key: "tenant-a"}}
	ctx := context.Background()

	var admitted atomic.Int64
	var mu sync.Mutex
	var held []*Reservation
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, res, err := e.Reserve(ctx, checks)
			if err != nil {
				t.Error(err)
				return
			}
			if v.Allowed {
				admitted.Add(1)
				mu.Lock()
				held = append(held, res)
				mu.Unlock()
			} else if d := v.Decisions[0]; d.Reason != ReasonLimited || d.RetryAfter != SlotRetryAfter || d.Policy != "inflight" {
				t.Errorf("denial: got %+v, want ReasonLimited, RetryAfter %s, policy inflight", d, SlotRetryAfter)
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 4 {
		t.Fatalf("admitted: got %d of 64, want 4", got)
	}
	g := checks[0].group()
	for i, res := range held {
		if err := res.Done(ctx); err != nil {
			t.Fatal(err)
		}
		if err := res.Done(ctx); err != nil { // settling twice gives back nothing more
			t.Fatal(err)
		}
		if got, want := e.local.slots(g).held("tenant-a"), int64(3-i); got != want {
			t.Fatalf("after %d releases: got %d held, want %d", i+1, got, want)
		}
	}
	if got := e.local.Keys(g); got != 0 {
		t.Fatalf("keys after every release: got %d, want 0", got)
	}
	for i := range 4 {
		if v, _, _ := e.Reserve(ctx, checks); !v.Allowed {
			t.Fatalf("request %d after the release: denied, want admitted", i+1)
		}
	}
}

// A request that another policy denies holds no slot, and the slot's
// headers count what is really free.
func TestConcurrencySlotFreedWhenAnotherPolicyDenies(t *testing.T) {
	e, err := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	slots := Check{Rule: &Rule{Name: "inflight", Algorithm: Concurrency}, Limit: Limit{Rate: 2, Period: time.Second, Burst: 2}, Key: "k"}
	rate := Check{Rule: &Rule{Name: "rate"}, Limit: Limit{Rate: 1, Period: time.Hour, Burst: 1}, Key: "k"}
	ctx := context.Background()
	v, res, err := e.Reserve(ctx, []Check{slots, rate})
	if err != nil || !v.Allowed {
		t.Fatalf("first: got allowed=%v err=%v, want admitted", v.Allowed, err)
	}
	if got := v.Decisions[0].Remaining; got != 1 {
		t.Fatalf("remaining slots: got %d, want 1", got)
	}
	v, _, err = e.Reserve(ctx, []Check{slots, rate})
	if i, denied := v.DeniedBy(); err != nil || v.Allowed || !denied || i != 1 {
		t.Fatalf("second: got allowed=%v denied=%d (%v) err=%v, want denied by the rate policy", v.Allowed, i, denied, err)
	}
	if got := v.Decisions[0].Remaining; got != 1 {
		t.Fatalf("remaining slots shown on the denial: got %d, want 1", got)
	}
	if got := e.local.slots(slots.group()).held("k"); got != 1 {
		t.Fatalf("held after the denial: got %d, want 1 (the first request's)", got)
	}
	if err := res.Settle(ctx, []int64{1, 1}); err != nil { // a cost of 1 still ends the request
		t.Fatal(err)
	}
	if got := e.local.Keys(slots.group()); got != 0 {
		t.Fatalf("keys after settling: got %d, want 0", got)
	}
}
