package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// BenchmarkServePolicyRoute serves the route of BenchmarkServePolicies
// with N policies alone (N=0 is a route without any), so that its
// allocs/op and B/op are that route's, and so that an instruction count
// of two iteration counts (see docs/scaling.md) prices one request of it:
//
//	go test -run '^$' -bench BenchmarkServePolicyRoute -benchmem ./proxy/
//
// Its ns/op is a lone timing: compare routes with BenchmarkServePolicies,
// which takes turns with an anchor.
func BenchmarkServePolicyRoute(b *testing.B) {
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{0, 1, 2, 4, 8} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			get := plainGet(b, policiesHandler(b, engine, n))
			get() // the buckets exist before the loop
			b.ReportAllocs()
			for b.Loop() {
				get()
			}
		})
	}
}

// A policy past the second allocates nothing on the allow path: a route of
// 8 local policies allocates what one of 3 does (one array for the checks
// past the plan's), and a route of 2 what one of 1 does.
func TestExtraPoliciesAllocateNothing(t *testing.T) {
	if raceDetector {
		t.Skip("allocation counts are not exact with -race")
	}
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	allocs := func(n int) float64 {
		get := plainGet(t, policiesHandler(t, engine, n))
		get()
		return testing.AllocsPerRun(200, get)
	}
	for _, pair := range [][2]int{{1, 2}, {3, 8}} {
		if few, many := allocs(pair[0]), allocs(pair[1]); many > few {
			t.Errorf("allocations per request: got %v with %d policies, %v with %d; want no more", many, pair[1], few, pair[0])
		}
	}
}
