package limiter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// decideAt decides checks at now through a fresh engine over l and
// reports whether the request passed.
func decideAt(t *testing.T, l *Local, now time.Time, checks ...Check) bool {
	t.Helper()
	e, err := NewEngine(func() time.Time { return now }, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Decide(context.Background(), checks)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return v.Allowed
}

// A rule remembers its bucket store, and what it remembers never outlives
// the store: after Retain drops the group (a reload changed the limit and
// back), the rule's next check starts a fresh bucket in the store that
// Local holds, not in the dropped one.
func TestRuleStoreFollowsRetain(t *testing.T) {
	l := NewLocal(0)
	rule := &Rule{Name: "p"}
	lim := Limit{Rate: 1, Period: time.Hour, Burst: 2}
	g := BucketGroup{Policy: "p", Limit: lim}
	c := Check{Rule: rule, Limit: lim, Key: "k"}
	for i, want := range []bool{true, true, false} {
		if got := decideAt(t, l, t0, c); got != want {
			t.Fatalf("request %d: got allowed=%v, want %v", i+1, got, want)
		}
	}
	l.Retain(func(BucketGroup) bool { return false })
	if l.Keys(g) != 0 {
		t.Fatalf("after Retain got %d keys, want 0", l.Keys(g))
	}
	if !decideAt(t, l, t0, c) {
		t.Fatal("after Retain got the request denied, want a fresh bucket")
	}
	if l.Keys(g) != 1 {
		t.Fatalf("got %d keys in the group's store, want 1: the check used a store Local no longer holds", l.Keys(g))
	}
	// And the bucket is the one Local holds: another rule of the same
	// group (the next snapshot's) sees what this one took.
	next := Check{Rule: &Rule{Name: "p"}, Limit: lim, Key: "k"}
	if !decideAt(t, l, t0, next) || decideAt(t, l, t0, c) {
		t.Fatal("got the two rules of one group counting apart, want one bucket")
	}
}

// A rule asked at two limits (a tenant's plan picks the limit) keeps each
// limit's buckets apart, whichever the rule remembers.
func TestRuleStoreAtTwoLimits(t *testing.T) {
	l := NewLocal(0)
	rule := &Rule{Name: "plans"}
	free := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	pro := Limit{Rate: 1, Period: time.Hour, Burst: 3}
	admitted := map[Limit]int{}
	for range 10 {
		for _, lim := range []Limit{free, pro} {
			if decideAt(t, l, t0, Check{Rule: rule, Limit: lim, Key: "tenant"}) {
				admitted[lim]++
			}
		}
	}
	if admitted[free] != 1 || admitted[pro] != 3 {
		t.Fatalf("got %d admitted at the free limit and %d at the pro one, want 1 and 3", admitted[free], admitted[pro])
	}
	if l.Keys(BucketGroup{Policy: "plans", Limit: free}) != 1 || l.Keys(BucketGroup{Policy: "plans", Limit: pro}) != 1 {
		t.Fatal("got a limit's key missing from Local's stores")
	}
}

// Many goroutines checking through new rules and groups at once, while
// Retain replaces the stores: every admission comes out of the one bucket
// Local holds for its group, so the admitted count of a key is its burst
// exactly (the clock does not move: nothing refills).
func TestRuleStoreConcurrent(t *testing.T) {
	l := NewLocal(0)
	const (
		groups  = 8
		burst   = 50
		workers = 64
		tries   = 40
	)
	rules := make([]*Rule, groups)
	for i := range rules {
		rules[i] = &Rule{Name: fmt.Sprint("g", i)}
	}
	lim := Limit{Rate: 1, Period: time.Hour, Burst: burst}
	e, err := NewEngine(func() time.Time { return t0 }, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var admitted [groups]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for i := range tries {
				gi := (w + i) % groups
				v, err := e.Decide(context.Background(), []Check{{Rule: rules[gi], Limit: lim, Key: "k"}})
				if err != nil {
					t.Errorf("Decide: %v", err)
					return
				}
				if v.Allowed {
					admitted[gi].Add(1)
				}
			}
		})
	}
	// Retain keeps every group: it only replaces the map, which must not
	// lose a bucket nor let a rule keep a stale store.
	wg.Go(func() {
		<-start
		for range 50 {
			l.Retain(func(BucketGroup) bool { return true })
		}
	})
	close(start)
	wg.Wait()
	for gi := range groups {
		if got := admitted[gi].Load(); got != burst {
			t.Errorf("group %d: got %d admitted, want the burst %d exactly", gi, got, burst)
		}
	}
}
