package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/heaptest"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
)

// Hundreds of 1 MiB responses through an idempotent route, each under its own
// key: the live heap grows by no more than the in-process store's byte
// bound (plus a little for the servers' own buffers). The responses dropped
// to stay under it leave done markers: a duplicate of one gets 409 with the
// status of the first, and never reaches the upstream again; a duplicate of
// a response still kept is replayed whole.
func TestIdempotentStoreBoundedByBytes(t *testing.T) {
	const (
		maxBytes  = 16 << 20
		responses = 200
		clients   = 8
		bodySize  = 1 << 20
		slack     = 16 << 20 // connections' buffers, pools, the test's own
	)
	big := bytes.Repeat([]byte("r"), bodySize)
	var hits atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		w.Write(big)
	}))
	store, err := idempotency.NewLocal(time.Now, idempotency.LocalConfig{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.ReplaceAll(`
routes:
  - name: pay
    upstream: "UPSTREAM"
    match: {path_prefix: /pay}
    idempotency: {required: true, max_response_bytes: 1048576}
`, "UPSTREAM", up.URL)
	srv, _ := newGateway(t, compileYAML(t, yaml), newEngine(t, newTestClock()), gatewayOpts{idem: store})
	client := srv.Client()

	before := heaptest.Live()
	keys := make(chan int, responses)
	for i := range responses {
		keys <- i
	}
	close(keys)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range clients {
		wg.Go(func() {
			for i := range keys {
				r, err := tryDo(client, http.MethodPost, srv.URL+"/pay", fmt.Sprintf(`{"order":%d}`, i), payHeader(fmt.Sprint("order-", i)))
				if err != nil || r.status != http.StatusCreated || len(r.body) != bodySize {
					failed.Store(fmt.Sprintf("order-%d: status %d, %d bytes, err %v", i, r.status, len(r.body), err))
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("first requests: %s; want 201 with %d bytes", f, bodySize)
	}
	client.Transport.(*http.Transport).CloseIdleConnections()
	after := heaptest.Live()
	grown := int64(after) - int64(before)
	st := store.Stats()
	t.Logf("%d responses of 1 MiB: live heap %d MiB -> %d MiB (+%d MiB); store %+v",
		responses, before>>20, after>>20, grown>>20, st)
	if grown > maxBytes+slack {
		t.Fatalf("live heap grew by %d MiB for %d responses of 1 MiB, want at most the bound %d MiB + %d MiB",
			grown>>20, responses, maxBytes>>20, slack>>20)
	}
	if st.Bytes > maxBytes || st.BodiesDropped == 0 || st.Keys != responses {
		t.Fatalf("store %+v: want %d keys, at most %d bytes, responses dropped", st, responses, maxBytes)
	}

	// The first orders' responses were dropped (closest to expiry): their
	// duplicates are told the request was done, and the upstream is not
	// called again.
	upstreamHits := hits.Load()
	r := pay(t, client, srv.URL, "order-0", `{"order":0}`)
	if r.status != http.StatusConflict {
		t.Fatalf("duplicate of a dropped response: got %d (%d bytes), want 409", r.status, len(r.body))
	}
	want := "the request with this Idempotency-Key was completed (status 201), but its response was not kept to be replayed"
	if e := decodeError(t, r); e.Code != 40900 || e.Message != want {
		t.Fatalf("409 body: got %+v, want code 40900 and %q", e, want)
	}
	if r := pay(t, client, srv.URL, "order-0", `{"order":"other"}`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("another request under a dropped response's key: got %d, want 422", r.status)
	}
	// The last order's response is still kept: replayed whole.
	last := fmt.Sprint("order-", responses-1)
	r = pay(t, client, srv.URL, last, fmt.Sprintf(`{"order":%d}`, responses-1))
	if r.status != http.StatusCreated || len(r.body) != bodySize || r.header.Get(hdrReplayed) != "true" {
		t.Fatalf("duplicate of a kept response: got %d, %d bytes, replayed %q; want 201, %d bytes, true",
			r.status, len(r.body), r.header.Get(hdrReplayed), bodySize)
	}
	if got := hits.Load(); got != upstreamHits {
		t.Fatalf("upstream hits: got %d after the duplicates, want %d (none reached it)", got, upstreamHits)
	}
}
