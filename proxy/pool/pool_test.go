package pool

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// newState is one route's pool of members named by weights' keys.
func newState(t *testing.T, balance policies.Balance, weights ...int) *State {
	t.Helper()
	cfg := &policies.Pool{Balance: balance, Health: policies.Health{Failures: 5, Ejection: 30 * time.Second, MaxEjection: 5 * time.Minute}}
	for i, w := range weights {
		cfg.Members = append(cfg.Members, policies.Member{Name: fmt.Sprintf("m%d", i), Weight: w})
	}
	route := &policies.Route{Name: "r", Pool: cfg}
	snap := &policies.Snapshot{Routes: []*policies.Route{route}}
	p := New(Config{Now: func() time.Time { return t0 }})
	return p.For(snap, route)
}

func TestRoundRobinFollowsWeights(t *testing.T) {
	s := newState(t, policies.BalanceRoundRobin, 3, 1, 2)
	got := make([]int, 3)
	for range 600 {
		i, ok := s.Pick(t0, "", false, 0)
		if !ok {
			t.Fatal("no pick")
		}
		got[i]++
	}
	if want := []int{300, 100, 200}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v picks, want %v", got, want)
	}
}

func TestLeastRequestAvoidsTheBusy(t *testing.T) {
	s := newState(t, policies.BalanceLeastRequest, 1, 1)
	for range 10 {
		s.Begin(0) // ten in flight on m0
	}
	for range 100 {
		if i, _ := s.Pick(t0, "", false, 0); i != 1 {
			t.Fatalf("got m%d, want the idle m1", i)
		}
	}
}

func TestHashMovesOnlyTheLostMembersKeys(t *testing.T) {
	s := newState(t, policies.BalanceHash, 1, 1, 1, 1)
	before := map[string]int{}
	for k := range 2000 {
		key := fmt.Sprintf("tenant-%d", k)
		i, _ := s.Pick(t0, key, true, 0)
		before[key] = i
		if again, _ := s.Pick(t0, key, true, 0); again != i {
			t.Fatalf("%s went to m%d then m%d", key, i, again)
		}
	}
	// m2 fails until it is ejected.
	for range 5 {
		s.Begin(2)
		s.End(2, t0, Failure, 0, 0)
	}
	moved, share := 0, 0
	for key, was := range before {
		now, _ := s.Pick(t0, key, true, 0)
		switch {
		case was == 2:
			share++
			if now == 2 {
				t.Fatalf("%s still goes to the ejected m2", key)
			}
		case now != was:
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys of the members still in moved, want 0", moved)
	}
	if share < 400 || share > 600 {
		t.Errorf("m2 held %d of 2000 keys, want about a quarter", share)
	}
}

func TestEjectionLengthensAndEnds(t *testing.T) {
	s := newState(t, policies.BalanceRoundRobin, 1, 1, 1, 1)
	now := t0
	fail := func(n int) {
		for range n {
			s.Begin(0)
			s.End(0, now, Failure, 0, 0)
		}
	}
	fail(4)
	if h := s.Member(0).HealthAt(now); h != Healthy {
		t.Fatalf("after 4 failures: %s, want healthy (5 eject)", h)
	}
	fail(1)
	for _, tc := range []struct {
		after time.Duration
		want  Health
	}{{29 * time.Second, Ejected}, {30 * time.Second, Healthy}} {
		if h := s.Member(0).HealthAt(now.Add(tc.after)); h != tc.want {
			t.Errorf("first ejection, %s on: %s, want %s", tc.after, h, tc.want)
		}
	}
	now = now.Add(30 * time.Second)
	fail(5) // back, and failing again: twice as long
	if h := s.Member(0).HealthAt(now.Add(59 * time.Second)); h != Ejected {
		t.Errorf("second ejection, 59s on: %s, want ejected", h)
	}
	if h := s.Member(0).HealthAt(now.Add(60 * time.Second)); h != Healthy {
		t.Errorf("second ejection, 60s on: %s, want healthy", h)
	}
	for range 20 { // the cap: 5m
		now = now.Add(5 * time.Minute)
		fail(5)
	}
	if h := s.Member(0).HealthAt(now.Add(5 * time.Minute)); h != Healthy {
		t.Errorf("an ejection outlasted max_ejection: %s", h)
	}
	// Healthy for max_ejection after it is back: the next one is short again.
	now = now.Add(5 * time.Minute)
	s.End(0, now.Add(5*time.Minute), Success, 0, 0)
	now = now.Add(5 * time.Minute)
	fail(5)
	if h := s.Member(0).HealthAt(now.Add(30 * time.Second)); h != Healthy {
		t.Errorf("after a healthy spell the ejection is 30s again, got %s at 30s", h)
	}
}

func TestNeverMoreThanHalfEjected(t *testing.T) {
	s := newState(t, policies.BalanceRoundRobin, 1, 1, 1, 1)
	for i := range 4 {
		for range 5 {
			s.Begin(i)
			s.End(i, t0, Failure, 0, 0)
		}
	}
	out := 0
	for i := range 4 {
		if s.Member(i).HealthAt(t0) == Ejected {
			out++
		}
	}
	if out != 2 {
		t.Errorf("%d of 4 members ejected, want 2 (never more than half)", out)
	}
}

func TestRetryAfterHoldsAMember(t *testing.T) {
	s := newState(t, policies.BalanceRoundRobin, 1, 1)
	s.Begin(0)
	s.End(0, t0, Success, 0, 10*time.Second)
	for range 10 {
		if i, _ := s.Pick(t0.Add(9*time.Second), "", false, 0); i != 1 {
			t.Fatalf("got m%d during m0's Retry-After, want m1", i)
		}
	}
	seen := map[int]bool{}
	for range 4 {
		i, _ := s.Pick(t0.Add(10*time.Second), "", false, 0)
		seen[i] = true
	}
	if !seen[0] {
		t.Error("m0 not picked once its Retry-After passed")
	}
}

func TestLeastBadServesWhenAllAreOut(t *testing.T) {
	s := newState(t, policies.BalanceRoundRobin, 1, 1)
	s.End(0, t0, Success, 0, 20*time.Second)
	s.End(1, t0, Success, 0, 10*time.Second)
	if i, ok := s.Pick(t0, "", false, 0); !ok || i != 1 {
		t.Errorf("got m%d (%v), want m1, back first", i, ok)
	}
	if _, ok := s.Pick(t0, "", false, Tried(0).Add(0).Add(1)); ok {
		t.Error("a pick after every member was tried")
	}
}

func TestBudgetIsAShareOfInFlight(t *testing.T) {
	b := NewBudget(0.2, 3)
	for range 3 {
		if !b.TryRetry() {
			t.Fatal("the floor of 3 refused")
		}
	}
	if b.TryRetry() {
		t.Fatal("a 4th retry with nothing in flight")
	}
	for range 50 {
		b.Begin()
	}
	granted := 3
	for b.TryRetry() {
		granted++
	}
	if granted != 10 {
		t.Errorf("got %d retries with 50 in flight, want 10", granted)
	}
	b.RetryDone()
	if !b.TryRetry() {
		t.Error("a retry given back was not there again")
	}
	if st := b.Stats(); st.Peak != 10 || st.Refused != 2 {
		t.Errorf("got %+v, want peak 10 and 2 refused", st)
	}
}

func TestReloadKeepsHealth(t *testing.T) {
	cfg := &policies.Pool{Balance: policies.BalanceRoundRobin, Health: policies.Health{Failures: 1, Ejection: time.Minute, MaxEjection: time.Hour},
		Members: []policies.Member{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}}
	route := &policies.Route{Name: "r", Pool: cfg}
	snap := &policies.Snapshot{Routes: []*policies.Route{route}}
	holder := &holder{snap}
	p := New(Config{Snapshots: holder, Now: func() time.Time { return t0 }})
	s := p.For(snap, route)
	s.Begin(1)
	s.End(1, t0, Failure, 0, 0)
	// A reload that keeps b (now second of two) and drops c.
	cfg2 := &policies.Pool{Balance: policies.BalanceRoundRobin, Health: cfg.Health, Members: []policies.Member{{Name: "b", Weight: 1}, {Name: "a", Weight: 1}}}
	route2 := &policies.Route{Name: "r", Pool: cfg2}
	holder.s = &policies.Snapshot{Routes: []*policies.Route{route2}}
	s2 := p.For(holder.s, route2)
	if h := s2.Member(0).HealthAt(t0); h != Ejected {
		t.Errorf("b after the reload: %s, want ejected still", h)
	}
	if n := len(p.Stats()); n != 2 {
		t.Errorf("got %d members in the stats, want 2 (c is gone)", n)
	}
}

type holder struct{ s *policies.Snapshot }

func (h *holder) Load() *policies.Snapshot { return h.s }

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
