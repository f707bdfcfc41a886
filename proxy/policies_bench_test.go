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
