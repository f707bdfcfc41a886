package redislimit

import (
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

func TestBreakerAtFixedInstants(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBreaker(clock.Now, 3, 500*time.Millisecond)

	type step struct {
		name      string
		advance   time.Duration
		do        string // "allow", "fail", "failProbe", "succeed", "succeedProbe", "release"
		wantOK    bool   // for allow
		wantProbe bool   // for allow
		wantOpen  bool   // for fail: opened by this failure
		wantState breakerState
	}
	steps := []step{
		{name: "closed allows", do: "allow", wantOK: true, wantState: breakerClosed},
		{name: "failure 1", do: "fail", wantState: breakerClosed},
		{name: "failure 2", do: "fail", wantState: breakerClosed},
		{name: "a success resets the count", do: "succeed", wantState: breakerClosed},
		{name: "failure 1 again", do: "fail", wantState: breakerClosed},
		{name: "failure 2 again", do: "fail", wantState: breakerClosed},
		{name: "failure 3 opens", do: "fail", wantOpen: true, wantState: breakerOpen},
		{name: "open refuses", do: "allow", wantOK: false, wantState: breakerOpen},
		{name: "still open just before the cooldown", advance: 499 * time.Millisecond, do: "allow", wantOK: false, wantState: breakerOpen},
		{name: "straggler failure changes nothing", do: "fail", wantState: breakerOpen},
		{name: "straggler success changes nothing", do: "succeed", wantState: breakerOpen},
		{name: "after the cooldown one probe", advance: time.Millisecond, do: "allow", wantOK: true, wantProbe: true, wantState: breakerHalfOpen},
		{name: "others fail fast while probing", do: "allow", wantOK: false, wantState: breakerHalfOpen},
		{name: "failed probe reopens", do: "failProbe", wantState: breakerOpen},
		{name: "reopened for a full cooldown", advance: 400 * time.Millisecond, do: "allow", wantOK: false, wantState: breakerOpen},
		{name: "next probe", advance: 100 * time.Millisecond, do: "allow", wantOK: true, wantProbe: true, wantState: breakerHalfOpen},
		{name: "a cancelled probe gives its turn back", do: "release", wantState: breakerOpen},
		{name: "next caller probes at once", do: "allow", wantOK: true, wantProbe: true, wantState: breakerHalfOpen},
		{name: "straggler success while probing changes nothing", do: "succeed", wantState: breakerHalfOpen},
		{name: "successful probe closes", do: "succeedProbe", wantState: breakerClosed},
		{name: "closed again", do: "allow", wantOK: true, wantState: breakerClosed},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			clock.Advance(st.advance)
			switch st.do {
			case "allow":
				ok, probe := b.allow()
				if ok != st.wantOK || probe != st.wantProbe {
					t.Fatalf("allow: got ok=%v probe=%v, want ok=%v probe=%v", ok, probe, st.wantOK, st.wantProbe)
				}
			case "fail", "failProbe":
				if opened := b.failure(st.do == "failProbe"); opened != st.wantOpen {
					t.Fatalf("failure: got opened=%v, want %v", opened, st.wantOpen)
				}
			case "succeed", "succeedProbe":
				b.success(st.do == "succeedProbe")
			case "release":
				b.release(true)
			}
			if got := b.current(); got != st.wantState {
				t.Fatalf("state: got %s, want %s", got, st.wantState)
			}
		})
	}
	if got := b.opens.Load(); got != 2 {
		t.Fatalf("opens: got %d, want 2 (the first opening and the failed probe)", got)
	}
}

func TestBreakerOneProbeUnderConcurrency(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBreaker(clock.Now, 1, time.Second)
	b.failure(false)
	clock.Advance(time.Second)
	var mu sync.Mutex
	probes := 0
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, probe := b.allow(); ok && probe {
				mu.Lock()
				probes++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if probes != 1 {
		t.Fatalf("got %d probes, want exactly 1", probes)
	}
}

func TestLogThrottle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var l logThrottle
	steps := []struct {
		at             time.Duration
		wantOK         bool
		wantSuppressed uint64
	}{
		{0, true, 0},
		{10 * time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 2},
		{1500 * time.Millisecond, false, 0},
		{3 * time.Second, true, 1},
	}
	for i, st := range steps {
		n, ok := l.allow(t0.Add(st.at))
		if ok != st.wantOK || n != st.wantSuppressed {
			t.Fatalf("step %d at %s: got ok=%v suppressed=%d, want %v %d", i, st.at, ok, n, st.wantOK, st.wantSuppressed)
		}
	}
}
