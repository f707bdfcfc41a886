package limiter_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/heaptest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// memoryKeys is how many distinct keys BenchmarkLocalKeyMemory sends.
const memoryKeys = 1_000_000

// BenchmarkLocalKeyMemory measures what a local key costs the gateway: the
// live heap (runtime.MemStats.HeapAlloc after a GC) once memoryKeys distinct
// keys have each been decided once through an Engine, minus the live heap
// before, divided by the keys. The keys are made inside the loop, as requests
// make them, so the key strings the map keeps are counted too.
//
//   - cap=2M: every key gets a bucket (nothing is evicted): B/key is the cost
//     of one key, bucket, map slot and key string together.
//   - cap=100k: the same keys against a cap ten times smaller, so 900k of
//     them evict another: B/cap-key is the heap at the end per key the cap
//     allows; heap-vs-cap and heap-vs-2cap are the heap at the end over the
//     heap when the cap was first reached and when twice the cap had been
//     sent (1.0 is flat).
//
// Each iteration fills a fresh Local, so run it once: -benchtime 1x.
// bench/sidebyside runs it and checks B/key and B/cap-key against 256.
func BenchmarkLocalKeyMemory(b *testing.B) {
	b.Run("cap=2M/keys=1M", func(b *testing.B) {
		for b.Loop() {
			heap, held := fillKeys(b, 2_000_000, memoryKeys)
			b.ReportMetric(float64(heap[memoryKeys])/float64(held), "B/key")
			b.ReportMetric(float64(held), "keys")
		}
	})
	b.Run("cap=100k/keys=1M", func(b *testing.B) {
		const capKeys = 100_000
		for b.Loop() {
			heap, held := fillKeys(b, capKeys, memoryKeys, capKeys, 2*capKeys)
			end := float64(heap[memoryKeys])
			b.ReportMetric(end/capKeys, "B/cap-key")
			b.ReportMetric(end/float64(heap[capKeys]), "heap-vs-cap")
			b.ReportMetric(end/float64(heap[2*capKeys]), "heap-vs-2cap")
			b.ReportMetric(float64(held), "keys")
		}
	})
}

// fillKeys decides n distinct keys once each on a fresh Local capped at
// maxKeys, at one fixed instant (so no bucket idles out), under a limit none
// of them reaches. It returns the live heap above the empty engine's after
// each count of keys in marks and after n, and the keys held at the end.
func fillKeys(b *testing.B, maxKeys, n int, marks ...int) (heap map[int]int64, held int) {
	b.Helper()
	now := time.Unix(1_800_000_000, 0)
	local := limiter.NewLocal(maxKeys)
	e, err := limiter.NewEngine(func() time.Time { return now }, local, nil)
	if err != nil {
		b.Fatal(err)
	}
	rule := &limiter.Rule{Name: "per-ip"}
	lim := limiter.Limit{Rate: 100, Period: time.Second, Burst: 100}
	checks := []limiter.Check{{Rule: rule, Limit: lim, Cost: 1}}
	ctx := context.Background()

	heap = make(map[int]int64, len(marks)+1)
	base := liveHeap()
	buf := make([]byte, 0, 32)
	for i := range n {
		if slices.Contains(marks, i) {
			heap[i] = liveHeap() - base
		}
		checks[0].Key = string(ipKey(buf[:0], i))
		if v, err := e.Decide(ctx, checks); err != nil || !v.Allowed {
			b.Fatalf("key %d: allowed %v, err %v; want allowed", i, v.Allowed, err)
		}
	}
	heap[n] = liveHeap() - base
	held = local.Keys(limiter.BucketGroup{Policy: rule.Name, Limit: lim})
	runtime.KeepAlive(e)
	return heap, held
}

// ipKey appends the i-th client network in 10.0.0.0/8, as a policy on ip
// keys it ("10.1.2.3/32").
func ipKey(buf []byte, i int) []byte {
	buf = append(buf, "10."...)
	buf = strconv.AppendInt(buf, int64(i>>16&0xff), 10)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, int64(i>>8&0xff), 10)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, int64(i&0xff), 10)
	return append(buf, "/32"...)
}

// liveHeap is the heap in use once garbage is collected, signed so that
// differences may be negative.
func liveHeap() int64 { return int64(heaptest.Live()) }
