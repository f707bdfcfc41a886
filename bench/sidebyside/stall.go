package main

import (
	"fmt"
	"runtime"
	"sync"
	"time"
)

// A machine's stalls: the spans in which a runnable thread does not run
// because the kernel runs something else or the hypervisor runs another
// machine. A request in flight during one waits it out, so once they fill
// about 1 % of the time they are what a p99 measures, whatever the proxy.
// The probe spins a thread a CPU on the clock while nothing else of the
// benchmark runs, and counts the gaps between two readings.

// stallGap is the shortest gap between two clock readings counted as a
// stall: far above a reading's cost (tens of nanoseconds) and a timer
// interrupt's, far below what moves a p99 in milliseconds.
const stallGap = 100 * time.Microsecond

// stallWarn is the share of the time stalled from which a WARN says that
// open-loop p99s are within reach of the stalls.
const stallWarn = 0.005

// stalls is what a probe saw, over all its threads.
type stalls struct {
	threads int
	span    time.Duration // each thread's
	gaps    int           // longer than stallGap
	stalled time.Duration // their sum
	longest time.Duration
}

// probeStalls spins threads threads (one a CPU) for span each, at once.
func probeStalls(threads int, span time.Duration) stalls {
	out := stalls{threads: threads, span: span}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			// A thread of its own, which the Go scheduler does not hand
			// to another goroutine: a gap is the kernel's or the
			// hypervisor's.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			start := time.Now()
			g := gapsOf(func() time.Duration { return time.Since(start) }, span)
			mu.Lock()
			out.gaps += g.gaps
			out.stalled += g.stalled
			out.longest = max(out.longest, g.longest)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// gapsOf reads now until span has passed since its first reading, and
// counts the gaps longer than stallGap between two readings.
func gapsOf(now func() time.Duration, span time.Duration) stalls {
	g := stalls{threads: 1, span: span}
	first := now()
	last := first
	for last-first < span {
		t := now()
		if d := t - last; d > stallGap {
			g.gaps++
			g.stalled += d
			g.longest = max(g.longest, d)
		}
		last = t
	}
	return g
}

// share is the part of the probe's time its threads were stalled.
func (s stalls) share() float64 {
	if s.threads == 0 || s.span <= 0 {
		return 0
	}
	return float64(s.stalled) / (float64(s.threads) * float64(s.span))
}

func (s stalls) String() string {
	return fmt.Sprintf("%.2f%% of %d threads × %v, in %d gaps over %v (longest %v)",
		100*s.share(), s.threads, s.span, s.gaps, stallGap, s.longest.Round(10*time.Microsecond))
}

// stallWarning is the WARN for a probe over stallWarn, "" for none.
func stallWarning(when string, s stalls) string {
	if s.share() < stallWarn {
		return ""
	}
	return fmt.Sprintf("the machine stalled %.2f%% of the time %s (longest %v): at about 1%% the stalls are what an open-loop p99 measures, so compare what the targets add, not their p99s, and rerun on a quieter machine before reading a p99 ratio near its threshold",
		100*s.share(), when, s.longest.Round(10*time.Microsecond))
}
