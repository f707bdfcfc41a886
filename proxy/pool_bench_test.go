package proxy

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/servetest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// BenchmarkServePool prices a route whose upstream is a pool of three
// members (each balance; passive health counted on every answer) against
// the same route with one upstream, the anchor: the same Handler path,
// upstreams answered in memory, taking turns (see takeTurns). It reports
// each one's CPU ns/op, pool/anchor, and each one's allocations a request:
//
//	go test -run '^$' -bench BenchmarkServePool ./proxy/
func BenchmarkServePool(b *testing.B) {
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	const route = "routes:\n  - name: bench\n    match: {path_prefix: /}\n    policies: [p]\n"
	const policy = "policies:\n  p: {key: ip, algorithm: token_bucket, rate: 10000000, per: 1s}\n"
	single := configHandler(b, route+"    upstream: http://127.0.0.1:1\n"+policy, engine, servetest.MemoryUpstream{})
	for _, balance := range []string{"round_robin", "least_request", "hash"} {
		extra := ""
		if balance == "hash" {
			extra = "    hash_key: ip\n"
		}
		pooled := configHandler(b, route+
			"    upstreams: [{name: a, url: http://127.0.0.1:1}, {name: b, url: http://127.0.0.1:2}, {name: c, url: http://127.0.0.1:3}]\n"+
			"    balance: "+balance+"\n"+extra+"    retry: {}\n"+policy, engine, servetest.MemoryUpstream{})
		b.Run("balance="+balance, func(b *testing.B) {
			base, with := takeTurns(b, [2]func(){plainGet(b, single), plainGet(b, pooled)})
			b.ReportMetric(base, "anchor-ns/op")
			b.ReportMetric(with, "pool-ns/op")
			b.ReportMetric(with/base, "pool/anchor")
			allocs, _ := allocsOf(plainGet(b, single))
			b.ReportMetric(allocs, "anchor-allocs/op")
			allocs, _ = allocsOf(plainGet(b, pooled))
			b.ReportMetric(allocs, "pool-allocs/op")
		})
	}
}
