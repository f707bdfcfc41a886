package pool

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/policies"
)

// probedMember answers its /healthz with the status ok says, and counts
// the probes.
type probedMember struct {
	ok     atomic.Bool
	probes atomic.Int64
	url    string
}

func newProbedMember(t *testing.T) *probedMember {
	m := &probedMember{}
	m.ok.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		m.probes.Add(1)
		if !m.ok.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	m.url = srv.URL
	return m
}

func checkedPool(t *testing.T, members []*probedMember) (*Pools, *State, *clocktest.Clock, *holder) {
	t.Helper()
	cfg := &policies.Pool{Balance: policies.BalanceRoundRobin,
		Health: policies.Health{Failures: 5, Ejection: 30 * time.Second, MaxEjection: 5 * time.Minute},
		Check:  &policies.HealthCheck{Path: "/healthz", Interval: 10 * time.Second, Timeout: 2 * time.Second, Healthy: 2, Unhealthy: 3}}
	for i, m := range members {
		u := mustURL(t, m.url)
		cfg.Members = append(cfg.Members, policies.Member{Name: string(rune('a' + i)), URL: u, Weight: 1})
	}
	route := &policies.Route{Name: "r", Pool: cfg}
	h := &holder{&policies.Snapshot{Routes: []*policies.Route{route}}}
	clock := clocktest.New(t0)
	p := New(Config{Snapshots: h, Now: clock.Now})
	return p, p.For(h.s, route), clock, h
}

// One failed probe takes out nothing; unhealthy in a row take a member
// down; healthy in a row bring it back; a second member failing as well
// stays in, as half of the pool is out.
func TestActiveChecks(t *testing.T) {
	a, b, c := newProbedMember(t), newProbedMember(t), newProbedMember(t)
	p, st, clock, _ := checkedPool(t, []*probedMember{a, b, c})
	ctx := context.Background()
	steps := []struct {
		advance    time.Duration
		aok, bok   bool
		wantProbes int64 // of a, so far
		wantA      Health
		wantB      Health // "": either (a and b change in the same round)
	}{
		{0, false, true, 1, Healthy, Healthy},                // one failed probe: nothing
		{5 * time.Second, false, true, 1, Healthy, Healthy},  // not due
		{5 * time.Second, false, false, 2, Healthy, Healthy}, // b starts failing
		{10 * time.Second, false, false, 3, Down, Healthy},   // third in a row: a down
		{10 * time.Second, true, false, 4, Down, Healthy},    // b's third: two of three would be out; a's one pass
		{10 * time.Second, true, false, 5, Healthy, ""},      // a's two passes: back
		{10 * time.Second, true, false, 6, Healthy, Down},    // now b goes
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		a.ok.Store(s.aok)
		b.ok.Store(s.bok)
		p.Probe(ctx)
		if n := a.probes.Load(); n != s.wantProbes {
			t.Fatalf("step %d: a probed %d times, want %d", i, n, s.wantProbes)
		}
		if h := st.Member(0).HealthAt(clock.Now()); h != s.wantA {
			t.Errorf("step %d: a %s, want %s", i, h, s.wantA)
		}
		if h := st.Member(1).HealthAt(clock.Now()); s.wantB != "" && h != s.wantB {
			t.Errorf("step %d: b %s, want %s", i, h, s.wantB)
		}
	}
	// A member that is down takes no requests.
	for range 6 {
		if i, _ := st.Pick(clock.Now(), "", false, 0); i == 1 {
			t.Fatal("b, down by its checks, was picked")
		}
	}
}

// A reload that drops the pool stops its probes; Run returns when its
// context ends.
func TestChecksFollowReloads(t *testing.T) {
	a := newProbedMember(t)
	p, _, clock, h := checkedPool(t, []*probedMember{a})
	p.Probe(context.Background())
	h.s = &policies.Snapshot{Routes: []*policies.Route{{Name: "r"}}}
	clock.Advance(time.Minute)
	p.Probe(context.Background())
	if n := a.probes.Load(); n != 1 {
		t.Errorf("%d probes, want 1: the pool is gone", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
