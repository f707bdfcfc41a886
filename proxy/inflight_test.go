package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// gatedUpstream counts the requests it is serving and holds each one until
// the current gate is closed or the request is cancelled; it never sleeps.
type gatedUpstream struct {
	mu      sync.Mutex
	gate    chan struct{}
	now     atomic.Int64
	max     atomic.Int64
	arrived chan struct{} // one per request that reached the upstream
	gone    chan struct{} // one per request whose context ended before its gate
}

func newGatedUpstream() *gatedUpstream {
	return &gatedUpstream{gate: make(chan struct{}), arrived: make(chan struct{}, 1024), gone: make(chan struct{}, 1024)}
}

// open releases the requests waiting and makes later ones wait on a new gate.
func (u *gatedUpstream) open() {
	u.mu.Lock()
	close(u.gate)
	u.gate = make(chan struct{})
	u.mu.Unlock()
}

func (u *gatedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	gate := u.gate
	u.mu.Unlock()
	n := u.now.Add(1)
	defer u.now.Add(-1)
	for {
		m := u.max.Load()
		if n <= m || u.max.CompareAndSwap(m, n) {
			break
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: first\n\n")
	w.(http.Flusher).Flush()
	u.arrived <- struct{}{}
	select {
	case <-gate:
		fmt.Fprint(w, "data: last\n\n")
	case <-r.Context().Done():
		u.gone <- struct{}{}
	}
}

// inflightGateway serves yaml's routes (upstream "UPSTREAM") through the
// real limiter with local state only; settled receives one value per
// reservation settled.
func inflightGateway(t *testing.T, yaml, upstream string) (base string, local *limiter.Local, settled <-chan struct{}) {
	t.Helper()
	local = limiter.NewLocal(0)
	e, err := limiter.NewEngine(time.Now, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, settled = gatewayOn(t, yaml, upstream, e)
	return base, local, settled
}

// gatewayOn serves yaml's routes through e.
func gatewayOn(t *testing.T, yaml, upstream string, e *limiter.Engine) (base string, settled <-chan struct{}) {
	t.Helper()
	snap, err := policies.Parse("gateway.yaml", []byte(strings.ReplaceAll(yaml, "UPSTREAM", upstream)), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, h := newGateway(t, snap, e, gatewayOpts{})
	ch := make(chan struct{}, 16384)
	h.settled = func() { ch <- struct{}{} }
	return srv.URL, ch
}

const inflightYAML = `
routes:
  - {name: r, upstream: "UPSTREAM", match: {path_prefix: /}, policies: [inflight]}
policies:
  inflight: {key: "header:X-Tenant", algorithm: concurrency, limit: 4}
`

// waitN receives n values from ch, failing after a bound.
func waitN(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%s: got %d, want %d", what, i, n)
		}
	}
}

// get sends GET / as tenant and returns the response with its body read.
func getAs(t *testing.T, base, tenant string) response {
	t.Helper()
	return do(t, http.DefaultClient, http.MethodGet, base+"/", nil, http.Header{"X-Tenant": {tenant}})
}

// 64 requests of one tenant at once, limit 4: the upstream never serves
// more than 4, the others get 429 naming the policy, and every slot comes
// back when the upstream answers.
func TestInFlightLimitHoldsUnderLoad(t *testing.T) {
	up := newGatedUpstream()
	base, local, settled := inflightGateway(t, inflightYAML, newUpstream(t, up).URL)

	results := make(chan response, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- getAs(t, base, "a")
		}()
	}
	waitN(t, up.arrived, 4, "requests at the upstream")
	var refused int
	for refused < 60 {
		r := <-results
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("while 4 are in flight: got %d %s, want 429", r.status, r.body)
		}
		if e := decodeError(t, r); e.Policy != "inflight" || e.Code != 42900 {
			t.Fatalf("429 body: got %+v, want code 42900 naming policy inflight", e)
		}
		for h, want := range map[string]string{"X-Ratelimit-Limit": "4", "X-Ratelimit-Remaining": "0", "Retry-After": "1"} {
			if got := r.header.Get(h); got != want {
				t.Fatalf("%s on a 429: got %q, want %q", h, got, want)
			}
		}
		refused++
	}
	up.open()
	wg.Wait()
	close(results)
	for r := range results {
		if r.status != http.StatusOK {
			t.Fatalf("admitted request: got %d, want 200", r.status)
		}
	}
	waitN(t, settled, 4, "settled reservations")
	if got := up.max.Load(); got != 4 {
		t.Fatalf("max in flight at the upstream: got %d, want 4", got)
	}
	t.Logf("64 concurrent requests, limit 4: max in flight at the upstream %d, refused %d", up.max.Load(), refused)
	g := limiter.BucketGroup{Policy: "inflight", Algorithm: limiter.Concurrency}
	if got := local.Keys(g); got != 0 {
		t.Fatalf("keys holding slots after the upstream answered: got %d, want 0", got)
	}

	// Every slot is back: 4 new requests are served at once, a fifth is not.
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := getAs(t, base, "a"); r.status != http.StatusOK {
				t.Errorf("after the release: got %d, want 200", r.status)
			}
		}()
	}
	waitN(t, up.arrived, 4, "requests at the upstream after the release")
	if r := getAs(t, base, "a"); r.status != http.StatusTooManyRequests {
		t.Fatalf("fifth while 4 are in flight: got %d, want 429", r.status)
	}
	wg.Add(1)
	go func() { // another key has its own slots
		defer wg.Done()
		if r := getAs(t, base, "b"); r.status != http.StatusOK {
			t.Errorf("tenant b: got %d, want 200 (its own slots)", r.status)
		}
	}()
	waitN(t, up.arrived, 1, "tenant b at the upstream")
	up.open()
	wg.Wait()
}

// A streamed response holds its slot until the stream ends, and a client
// that hangs up mid-stream frees it.
func TestInFlightSlotHeldUntilStreamEnds(t *testing.T) {
	yaml := `
routes:
  - {name: r, upstream: "UPSTREAM", match: {path_prefix: /}, policies: [inflight]}
policies:
  inflight: {key: "header:X-Tenant", algorithm: concurrency, limit: 1}
`
	up := newGatedUpstream()
	base, local, settled := inflightGateway(t, yaml, newUpstream(t, up).URL)
	g := limiter.BucketGroup{Policy: "inflight", Algorithm: limiter.Concurrency}

	open := func(ctx context.Context) (*http.Response, *bufio.Reader) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
		req.Header.Set("X-Tenant", "a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: got %d, want 200", resp.StatusCode)
		}
		if l, r := resp.Header.Get("X-Ratelimit-Limit"), resp.Header.Get("X-Ratelimit-Remaining"); l != "1" || r != "0" {
			t.Fatalf("slots in the headers: got limit %q remaining %q, want 1 and 0", l, r)
		}
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
			t.Fatalf("first event: got %q %v", line, err)
		}
		return resp, br
	}

	t.Run("ends", func(t *testing.T) {
		resp, br := open(context.Background())
		defer resp.Body.Close()
		<-up.arrived
		if r := getAs(t, base, "a"); r.status != http.StatusTooManyRequests {
			t.Fatalf("mid-stream: got %d, want 429 (the stream holds the slot)", r.status)
		}
		up.open()
		rest, err := io.ReadAll(br)
		if err != nil || string(rest) != "\ndata: last\n\n" {
			t.Fatalf("rest of the stream: got %q %v", rest, err)
		}
		waitN(t, settled, 1, "settled reservations")
		if got := local.Keys(g); got != 0 {
			t.Fatalf("keys holding slots after the stream ended: got %d, want 0", got)
		}
	})

	t.Run("client disconnects", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, _ := open(ctx)
		<-up.arrived
		if r := getAs(t, base, "a"); r.status != http.StatusTooManyRequests {
			t.Fatalf("mid-stream: got %d, want 429", r.status)
		}
		cancel()
		resp.Body.Close()
		waitN(t, up.gone, 1, "upstream requests cancelled")
		waitN(t, settled, 1, "settled reservations")
		if got := local.Keys(g); got != 0 {
			t.Fatalf("keys holding slots after the client left: got %d, want 0", got)
		}
		done := make(chan response, 1)
		go func() { done <- getAs(t, base, "a") }()
		<-up.arrived
		up.open()
		if r := <-done; r.status != http.StatusOK {
			t.Fatalf("after the disconnect: got %d, want 200", r.status)
		}
	})
}

// A request that a rate policy of the same route refuses holds no slot.
func TestInFlightBesideRatePolicy(t *testing.T) {
	yaml := `
routes:
  - {name: r, upstream: "UPSTREAM", match: {path_prefix: /}, policies: [inflight, hourly]}
policies:
  inflight: {key: "header:X-Tenant", algorithm: concurrency, limit: 2}
  hourly: {key: "header:X-Tenant", rate: 1, per: 1h}
`
	up := newGatedUpstream()
	base, local, settled := inflightGateway(t, yaml, newUpstream(t, up).URL)
	g := limiter.BucketGroup{Policy: "inflight", Algorithm: limiter.Concurrency}

	done := make(chan response, 1)
	go func() { done <- getAs(t, base, "a") }()
	<-up.arrived
	r := getAs(t, base, "a")
	if e := decodeError(t, r); r.status != http.StatusTooManyRequests || e.Policy != "hourly" {
		t.Fatalf("second request: got %d naming %q, want 429 naming hourly", r.status, e.Policy)
	}
	if got := local.Keys(g); got != 1 {
		t.Fatalf("keys holding slots: got %d, want 1 (the first request only)", got)
	}
	up.open()
	if r := <-done; r.status != http.StatusOK {
		t.Fatalf("first request: got %d, want 200", r.status)
	}
	waitN(t, settled, 1, "settled reservations")
	if got := local.Keys(g); got != 0 {
		t.Fatalf("keys holding slots at the end: got %d, want 0", got)
	}
}

// 10,000 requests one after another through a limit of 1: each finds its
// slot free, and none is left held.
func TestInFlightNoSlotLeaked(t *testing.T) {
	yaml := `
routes:
  - {name: r, upstream: "UPSTREAM", match: {path_prefix: /}, policies: [inflight]}
policies:
  inflight: {key: "header:X-Tenant", algorithm: concurrency, limit: 1}
`
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	base, local, settled := inflightGateway(t, yaml, up.URL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	const n = 10_000
	deadline := time.Now().Add(60 * time.Second)
	for i := range n {
		if r := do(t, client, http.MethodGet, base+"/", nil, http.Header{"X-Tenant": {"a"}}); r.status != http.StatusOK {
			t.Fatalf("request %d: got %d, want 200 (a slot leaked)", i+1, r.status)
		}
		waitN(t, settled, 1, "settled reservations")
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests within the time bound", i+1)
		}
	}
	if got := local.Keys(limiter.BucketGroup{Policy: "inflight", Algorithm: limiter.Concurrency}); got != 0 {
		t.Fatalf("keys holding slots after %d requests: got %d, want 0", n, got)
	}
}
