package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// Two gateway instances on one Redis hold one limit of requests in flight:
// 64 requests at once, half through each, and the upstream never serves
// more than 4; every lease is gone once the responses ended, and a client
// that hangs up frees its lease for the other instance.
func TestSharedInFlightAcrossGateways(t *testing.T) {
	s := redistest.Start(t)
	client, err := redisclient.New(redisclient.Options{Addrs: []string{s.Addr()}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	yaml := `
redis: {addrs: ["` + s.Addr() + `"]}
routes:
  - {name: r, upstream: "UPSTREAM", match: {path_prefix: /}, policies: [inflight]}
policies:
  inflight: {key: "header:X-Tenant", algorithm: shared_concurrency, limit: 4, lease: 2s}
`
	up := newGatedUpstream()
	upURL := newUpstream(t, up).URL
	var bases [2]string
	var settled [2]<-chan struct{}
	for i := range bases {
		bases[i], settled[i] = gatewayOn(t, yaml, upURL, engineOn(t, client))
	}
	leases := func() int64 {
		t.Helper()
		// the lease set of tenant "a": rl:{inflight:<digest>}:cc
		sum := sha256.Sum256([]byte("a"))
		n, err := client.ZCard(context.Background(), "rl:{inflight:"+hex.EncodeToString(sum[:16])+"}:cc").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	results := make(chan response, 64)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- getAs(t, bases[i%2], "a")
		}()
	}
	waitN(t, up.arrived, 4, "requests at the upstream")
	for range 60 {
		r := <-results
		if e := decodeError(t, r); r.status != http.StatusTooManyRequests || e.Policy != "inflight" {
			t.Fatalf("while 4 are in flight: got %d naming %q, want 429 naming inflight", r.status, e.Policy)
		}
	}
	if got := leases(); got != 4 {
		t.Fatalf("leases while 4 are in flight: got %d, want 4", got)
	}
	up.open()
	wg.Wait()
	close(results)
	for r := range results {
		if r.status != http.StatusOK {
			t.Fatalf("admitted request: got %d, want 200", r.status)
		}
	}
	for range 4 {
		select {
		case <-settled[0]:
		case <-settled[1]:
		case <-time.After(10 * time.Second):
			t.Fatal("reservations not settled")
		}
	}
	if got := up.max.Load(); got != 4 {
		t.Fatalf("max in flight at the upstream across two gateways: got %d, want 4", got)
	}
	t.Logf("64 concurrent requests over 2 gateways, limit 4: max in flight at the upstream %d", up.max.Load())
	if got := leases(); got != 0 {
		t.Fatalf("leases after the responses ended: got %d, want 0", got)
	}

	// A client of gateway 0 hangs up mid-stream with all 4 slots taken:
	// gateway 1 gets its slot.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, bases[0]+"/", nil)
			req.Header.Set("X-Tenant", "a")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				if i == 0 {
					resp.Body.Close() // hangs up
				} else {
					defer resp.Body.Close()
					<-ctx.Done()
				}
			}
		}()
	}
	waitN(t, up.arrived, 4, "requests at the upstream")
	waitN(t, up.gone, 1, "upstream requests cancelled")
	waitN(t, settled[0], 1, "settled reservations")
	done := make(chan response, 1)
	go func() { done <- getAs(t, bases[1], "a") }()
	waitN(t, up.arrived, 1, "the other gateway's request at the upstream")
	up.open()
	if r := <-done; r.status != http.StatusOK {
		t.Fatalf("other gateway after the hang-up: got %d, want 200", r.status)
	}
	cancel()
	wg.Wait()
}
