package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// idempotencyConfig is a payments route with idempotency keys, to the
// upstream at %[2]s, on the Redis at %[1]s.
const idempotencyConfig = `
server:
  listen: 127.0.0.1:0
redis:
  addrs: [%[1]s]
  timeout: 1s
routes:
  - name: payments
    match: {path_prefix: /payments, methods: [POST]}
    upstream: %[2]s
    idempotency: {required: true}
`

// Two "gateway serve" instances on one Redis: 100 concurrent duplicates of
// one payment, half through each, over 100 connections, reach the upstream
// once; the others get 409 while it runs, and every later duplicate, through
// either instance, gets its response replayed.
func TestIdempotencyAcrossTwoGateways(t *testing.T) {
	s := redistest.Start(t)
	var hits atomic.Int64
	door := make(chan struct{})
	arrived := make(chan struct{}, 128)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		arrived <- struct{}{}
		select {
		case <-door:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Location", "/payments/"+strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":%d,"fence":%q}`, n, r.Header.Get("X-Fencing-Token"))
	}))
	open := sync.OnceFunc(func() { close(door) })
	t.Cleanup(up.Close)
	t.Cleanup(open) // runs first: a request still at the door ends
	path := writePressureConfig(t, fmt.Sprintf(idempotencyConfig, s.Addr(), up.URL))
	gws := []*gateway{startGateway(t, "a", path), startGateway(t, "b", path)}
	c := clienttest.New(t, 100)

	const n = 100
	type result struct {
		status int
		body   string
		header http.Header
		err    error
	}
	post := func(base string) result {
		req, _ := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(`{"order":"A-1001"}`))
		req.Header.Set("Idempotency-Key", "pay-A-1001")
		resp, err := c.Do(req)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return result{resp.StatusCode, string(b), resp.Header, err}
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results <- post(gws[i%2].base) })
	}
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the upstream")
	}
	statuses := map[int]int{}
	for range n - 1 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		statuses[r.status]++
	}
	open()
	first := <-results
	wg.Wait()
	if first.err != nil || first.status != http.StatusCreated {
		t.Fatalf("first: %d %v, want 201", first.status, first.err)
	}
	if statuses[http.StatusConflict] != n-1 {
		t.Fatalf("duplicates while the first was upstream: %v, want %d × 409", statuses, n-1)
	}
	replayed := 0
	for i := range 20 {
		r := post(gws[i%2].base)
		if r.err != nil || r.status != http.StatusCreated || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" ||
			r.header.Get("Location") != first.header.Get("Location") {
			t.Fatalf("replay %d through %s: %d %q %v, want 201 %q replayed", i, gws[i%2].name, r.status, r.body, r.err, first.body)
		}
		replayed++
	}
	if hits.Load() != 1 {
		t.Fatalf("upstream hits %d, want 1", hits.Load())
	}
	t.Logf("two gateways: sent %d, forwarded %d, rejected 409 %d, then replayed %d of %d", n+20, hits.Load(), statuses[http.StatusConflict], replayed, 20)
}
