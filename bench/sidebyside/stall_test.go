package main

import (
	"strings"
	"testing"
	"time"
)

// A clock read every 10 µs but for two gaps, of 500 µs and 2 ms: the
// probe counts those two and nothing else, and stops once the span has
// passed.
func TestGapsOf(t *testing.T) {
	var at time.Duration
	reads := 0
	now := func() time.Duration {
		reads++
		switch reads {
		case 10:
			at += 500 * time.Microsecond
		case 20:
			at += 2 * time.Millisecond
		default:
			at += 10 * time.Microsecond
		}
		return at
	}
	g := gapsOf(now, 5*time.Millisecond)
	if g.gaps != 2 || g.stalled != 2500*time.Microsecond || g.longest != 2*time.Millisecond {
		t.Errorf("gaps %+v, want 2 of 2.5 ms in all, the longest 2 ms", g)
	}
	if at < 5*time.Millisecond || at > 5*time.Millisecond+10*time.Microsecond {
		t.Errorf("stopped at %v, want at the 5 ms span", at)
	}
	if got := g.share(); got != 0.5 {
		t.Errorf("share %v, want 0.5 (2.5 ms of 5)", got)
	}
}

func TestStallReport(t *testing.T) {
	s := stalls{threads: 2, span: time.Second, gaps: 7, stalled: 12 * time.Millisecond, longest: 5123 * time.Microsecond}
	if got, want := s.String(), "0.60% of 2 threads × 1s, in 7 gaps over 100µs (longest 5.12ms)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if w := stallWarning("at start", s); !strings.Contains(w, "stalled 0.60% of the time at start (longest 5.12ms)") {
		t.Errorf("no WARN over the threshold: %q", w)
	}
	s.stalled = 9 * time.Millisecond // 0.45 %
	if w := stallWarning("at start", s); w != "" {
		t.Errorf("a WARN under the threshold: %q", w)
	}
	if (stalls{}).share() != 0 {
		t.Error("an empty probe has a share")
	}
}

// The probe on this machine: its figures are the machine's, so only their
// bounds are checked.
func TestProbeStalls(t *testing.T) {
	s := probeStalls(2, 20*time.Millisecond)
	if s.threads != 2 || s.span != 20*time.Millisecond {
		t.Fatalf("probe %+v", s)
	}
	// A thread's stalls fit in its span and the one gap that ended it.
	if s.stalled < 0 || s.stalled > time.Duration(s.threads)*(s.span+s.longest) || (s.gaps == 0) != (s.stalled == 0) || s.longest > s.stalled {
		t.Errorf("probe %+v", s)
	}
}

// The open loop's WARNs name the probe that went over, and only it.
func TestOpenRunStallWarnings(t *testing.T) {
	or := &openRun{
		stallsBefore: stalls{threads: 2, span: time.Second, gaps: 1, stalled: time.Millisecond},
		stallsAfter:  stalls{threads: 2, span: time.Second, gaps: 9, stalled: 20 * time.Millisecond, longest: 6 * time.Millisecond},
	}
	ws := or.stallWarnings()
	if len(ws) != 1 || !strings.Contains(ws[0], "stalled 1.00% of the time after the open loop") {
		t.Errorf("warnings %q, want one for the probe after the rounds", ws)
	}
}
