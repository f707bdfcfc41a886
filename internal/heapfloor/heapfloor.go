// Package heapfloor keeps the Go heap goal at or above a floor.
//
// A gateway keeps little alive (a few MB of buckets and buffers) and
// allocates a lot per request. With GOGC=100 the runtime collects whenever
// the heap doubles, so at a few MB live it collects tens of times a second
// under load, each time scanning every goroutine's stack: measured, 11 % of
// the gateway's CPU a request on the Redis path. A floor lets the heap grow
// to it before collecting while the live heap is small, and leaves GOGC's
// own rule in force once the live heap is large (half the floor or more),
// where a floor would change nothing anyway.
//
// It starts no goroutine: a finalizer, run by the runtime after each
// collection, adjusts GOGC to the live heap that collection found.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// runtimeHeapMinimum is the Go runtime's least heap goal at GOGC=100. The
// runtime scales it with GOGC (4 MB × GOGC/100), so a GOGC meant for a tiny
// live heap would also raise that least goal far past the floor: Percent
// caps GOGC where it reaches the floor.
const runtimeHeapMinimum = 4 << 20

// Percent is the GOGC that gives a live heap of live bytes a goal of at
// least floor bytes (the goal is the larger of live × (1 + GOGC/100) and
// 4 MB × GOGC/100), never less than base.
func Percent(live, floor uint64, base int) int {
	if floor == 0 || live >= floor {
		return base
	}
	p := float64(floor) * 100 / runtimeHeapMinimum
	if live > 0 {
		p = math.Min(p, float64(floor)/float64(live)*100-100)
	}
	return max(base, int(p))
}

// Floor adjusts GOGC after each collection until Stop.
type Floor struct {
	floor uint64
	base  int

	mu      sync.Mutex
	stopped bool
	last    int
	sample  []metrics.Sample
}

// Start keeps the heap goal at least floor bytes, from base (the GOGC the
// process runs with) upwards. A memory limit (GOMEMLIMIT) below twice the
// floor lowers the floor to half the limit, so that the floor never makes
// the runtime work against the limit.
func Start(floor uint64, base int) *Floor {
	if limit := debug.SetMemoryLimit(-1); limit > 0 && uint64(limit)/2 < floor {
		floor = uint64(limit) / 2
	}
	f := &Floor{floor: floor, base: base, last: base,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	if f.adjust() { // before the first collection too
		f.arm()
	}
	return f
}

// arm registers the finalizer that runs after the next collection.
func (f *Floor) arm() {
	s := new(sentinel)
	runtime.SetFinalizer(s, func(*sentinel) {
		if f.adjust() {
			f.arm()
		}
	})
}

// sentinel is garbage from birth: its finalizer runs after the collection
// that finds it. It is larger than the tiny allocator's 16 bytes, so it is
// not kept alive by a neighbour in a shared block.
type sentinel struct{ _ [32]byte }

// adjust sets GOGC for the live heap the last collection found, and
// reports whether to keep going.
func (f *Floor) adjust() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() != metrics.KindUint64 {
		return false // the runtime does not report it: leave GOGC alone
	}
	p := Percent(f.sample[0].Value.Uint64(), f.floor, f.base)
	// Small moves are not worth a call into the runtime.
	if p != f.last && (p == f.base || math.Abs(float64(p-f.last)) > float64(f.last)/10) {
		debug.SetGCPercent(p)
		f.last = p
	}
	return true
}

// Stop gives GOGC back its base value; no adjustment follows.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		debug.SetGCPercent(f.base)
	}
}

// Bytes is the floor in force: the one asked for, or half the memory
// limit when that is lower.
func (f *Floor) Bytes() uint64 { return f.floor }

// Percent is the GOGC the floor set last (the base before any collection).
func (f *Floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}
