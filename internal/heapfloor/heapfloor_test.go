package heapfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/heaptest"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		name              string
		live, floor       uint64
		base, want        int
		wantGoalAtLeastMB uint64
	}{
		// 4 MB × 1600 % = 64 MB: the runtime's own least goal reaches the floor.
		{"before any collection", 0, 64 * mib, 100, 1600, 64},
		{"tiny live heap: capped where the least goal is the floor", 1 * mib, 64 * mib, 100, 1600, 64},
		{"small live heap", 8 * mib, 64 * mib, 100, 700, 64},
		{"live heap at half the floor: GOGC's own rule", 32 * mib, 64 * mib, 100, 100, 64},
		{"live heap past the floor", 200 * mib, 64 * mib, 100, 100, 400},
		{"a higher base stays", 8 * mib, 64 * mib, 800, 800, 72},
		{"no floor", 1 * mib, 0, 100, 100, 4},
		{"a floor under the runtime's least goal changes nothing", 1 * mib, 2 * mib, 100, 100, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Percent(c.live, c.floor, c.base)
			if got != c.want {
				t.Fatalf("Percent(%d MiB, %d MiB, %d) = %d, want %d", c.live/mib, c.floor/mib, c.base, got, c.want)
			}
			// The goal the runtime computes from it reaches the floor and
			// overshoots it by no more than the rounding of one percent.
			goal := max(c.live+c.live*uint64(got)/100, runtimeHeapMinimum*uint64(got)/100)
			if goal < c.wantGoalAtLeastMB*mib {
				t.Fatalf("goal %d MiB, want at least %d MiB", goal/mib, c.wantGoalAtLeastMB)
			}
			if c.floor > 0 && got > c.base && goal > c.floor+c.floor/100 {
				t.Fatalf("goal %d MiB overshoots the floor of %d MiB", goal/mib, c.floor/mib)
			}
		})
	}
}

// In a real process: Start sets the GOGC for the floor at once, the
// finalizer follows the live heap across collections (a heap grown past
// half the floor gets the base back, a freed one the floor again), and Stop
// restores the base for good.
func TestFloorFollowsTheLiveHeap(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	const floor = 64 * mib
	f := Start(floor, 100)
	defer f.Stop()
	if got := heaptest.GOGC(t); got <= 100 || got != f.Percent() {
		t.Fatalf("GOGC %d after Start (floor says %d), want it raised for a small live heap", got, f.Percent())
	}

	waitGOGC := func(what string, ok func(int) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok(heaptest.GOGC(t)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOGC still %d", what, heaptest.GOGC(t))
			}
			runtime.GC() // each collection runs the finalizer that adjusts
			time.Sleep(time.Millisecond)
		}
	}
	ballast := make([][]byte, 0, 96)
	for range 96 {
		ballast = append(ballast, make([]byte, mib))
	}
	waitGOGC("96 MiB live", func(p int) bool { return p == 100 })
	runtime.KeepAlive(ballast)
	ballast = nil
	waitGOGC("ballast freed", func(p int) bool { return p > 100 })

	f.Stop()
	if got := heaptest.GOGC(t); got != 100 {
		t.Fatalf("GOGC %d after Stop, want 100", got)
	}
	runtime.GC()
	runtime.GC()
	if got := heaptest.GOGC(t); got != 100 {
		t.Fatalf("GOGC %d after Stop and two collections, want 100", got)
	}
}

// A memory limit below twice the floor lowers the floor to half the limit.
func TestFloorYieldsToTheMemoryLimit(t *testing.T) {
	prevPct := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prevPct)
	prev := debug.SetMemoryLimit(32 * mib)
	defer debug.SetMemoryLimit(prev)
	f := Start(64*mib, 100)
	defer f.Stop()
	if f.floor != 16*mib {
		t.Fatalf("floor %d MiB under a 32 MiB limit, want 16", f.floor/mib)
	}
}
