package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
	"github.com/ratelimit-gateway/gateway/redislock"
)

// payments is an upstream that takes payments the way a careful service
// does: it writes one payment per Idempotency-Key and refuses a write whose
// fencing token is below the largest it has seen for that key (a stale
// holder). Requests may be held at its door until the test opens it.
type payments struct {
	mu     sync.Mutex
	fences map[string]int64 // Idempotency-Key -> largest fencing token seen
	writes map[string]int   // Idempotency-Key -> payments written
	hits   atomic.Int64
	// hold, when set, keeps each request at the door until it is closed;
	// arrived gets one value per request at the door.
	hold    chan struct{}
	arrived chan int64 // the request's fencing token
	// status is what it answers (201 when zero).
	status atomic.Int64
	// big makes the body that many bytes.
	big atomic.Int64
}

func newPayments() *payments {
	return &payments{fences: map[string]int64{}, writes: map[string]int{}, arrived: make(chan int64, 256)}
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.hits.Add(1)
	key := r.Header.Get("Idempotency-Key")
	fence, _ := strconv.ParseInt(r.Header.Get("X-Fencing-Token"), 10, 64)
	p.arrived <- fence
	if p.hold != nil {
		select {
		case <-p.hold:
		case <-r.Context().Done():
			return
		}
	}
	p.mu.Lock()
	if seen := p.fences[key]; fence < seen {
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"error":"stale fencing token %d < %d"}`, fence, seen)
		return
	}
	p.fences[key] = fence
	p.writes[key]++
	p.mu.Unlock()
	status := int(p.status.Load())
	if status == 0 {
		status = http.StatusCreated
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/payments/%d", n))
	w.Header().Set("X-Not-Kept", "1")
	w.WriteHeader(status)
	body := fmt.Sprintf(`{"payment":%d,"fence":%d}`, n, fence)
	if big := p.big.Load(); big > 0 {
		body = strings.Repeat("x", int(big))
	}
	fmt.Fprint(w, body)
}

func (p *payments) written(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes[key]
}

const idemYAML = `
routes:
  - name: pay
    upstream: "UPSTREAM"
    match: {path_prefix: /pay}
    idempotency: {required: true, lock_ttl: LOCKTTL, max_response_bytes: 4096 WAIT}
`

// idemGateway serves idemYAML in front of up, on store (nil: in-process).
func idemGateway(t *testing.T, up http.Handler, store idempotency.Store, wait bool, lockTTL time.Duration) (string, *Handler) {
	t.Helper()
	yaml := strings.ReplaceAll(idemYAML, "UPSTREAM", newUpstream(t, up).URL)
	yaml = strings.ReplaceAll(yaml, "LOCKTTL", lockTTL.String())
	w := ""
	if wait {
		w = ", on_conflict: wait, max_wait: 10s"
	}
	snap := compileYAML(t, strings.ReplaceAll(yaml, " WAIT", w))
	srv, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{idem: store})
	return srv.URL, h
}

// redisIdem returns a store on a fresh redis-server, and the client to look
// at it.
func redisIdem(t *testing.T) (idempotency.Store, *redis.Client) {
	t.Helper()
	s := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	store, err := idempotency.NewRedis(client, idempotency.RedisConfig{Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return store, client
}

func payHeader(key string) http.Header {
	return http.Header{"Idempotency-Key": {key}, "Content-Type": {"application/json"}}
}

func pay(t *testing.T, c *http.Client, base, key, body string) response {
	t.Helper()
	return do(t, c, http.MethodPost, base+"/pay", strings.NewReader(body), payHeader(key))
}

// 100 concurrent duplicates of one payment, over 100 connections, reach the
// upstream once: the first is held at the upstream's door while the 99
// others get 409 with Retry-After; once it answers, later duplicates get
// its status, kept headers and body with Idempotent-Replayed: true. In
// process, on Redis, and on two gateways sharing one Redis.
func TestIdempotentDuplicatesReachUpstreamOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		instances int
		redis     bool
	}{{"local", 1, false}, {"redis", 1, true}, {"two gateways on one redis", 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			up := newPayments()
			up.hold = make(chan struct{})
			var store idempotency.Store
			if tc.redis {
				store, _ = redisIdem(t)
			}
			var bases []string
			for range tc.instances {
				base, _ := idemGateway(t, up, store, false, 10*time.Second)
				bases = append(bases, base)
			}
			client := clienttest.New(t, 100)
			const n = 100
			type result struct {
				r   response
				err error
			}
			results := make(chan result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					r, err := tryDo(client, http.MethodPost, bases[i%len(bases)]+"/pay", `{"amount":500}`, payHeader("order-1"))
					results <- result{r, err}
				})
			}
			<-up.arrived // the first is at the door
			statuses := map[int]int{}
			for range n - 1 {
				res := <-results
				if res.err != nil {
					t.Fatal(res.err)
				}
				statuses[res.r.status]++
				if res.r.status == http.StatusConflict {
					if e := decodeError(t, res.r); e.Code != 40900 || res.r.header.Get("Retry-After") != "1" {
						t.Fatalf("409: code %d, Retry-After %q; want 40900 and 1", e.Code, res.r.header.Get("Retry-After"))
					}
				}
			}
			close(up.hold)
			first := <-results
			wg.Wait()
			if first.err != nil || first.r.status != http.StatusCreated {
				t.Fatalf("first: %v %d %s, want 201", first.err, first.r.status, first.r.body)
			}
			if statuses[http.StatusConflict] != n-1 {
				t.Fatalf("duplicates while the first was upstream: %v, want %d × 409", statuses, n-1)
			}
			for i := range 20 {
				r := pay(t, client, bases[i%len(bases)], "order-1", `{"amount":500}`)
				if r.status != http.StatusCreated || string(r.body) != string(first.r.body) ||
					r.header.Get("Location") != first.r.header.Get("Location") || r.header.Get(hdrReplayed) != "true" {
					t.Fatalf("replay %d: %d %q Location %q Replayed %q; want 201 %q %q true", i, r.status, r.body,
						r.header.Get("Location"), r.header.Get(hdrReplayed), first.r.body, first.r.header.Get("Location"))
				}
				if r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Not-Kept") != "" {
					t.Fatalf("replay headers: %v; want Content-Type kept, X-Not-Kept not", r.header)
				}
			}
			if got := up.hits.Load(); got != 1 {
				t.Fatalf("upstream hits %d, want 1", got)
			}
			t.Logf("sent %d + 20, forwarded %d, rejected 409: %d, replayed 20", n, up.hits.Load(), statuses[http.StatusConflict])
		})
	}
}

// With on_conflict: wait, 100 concurrent duplicates all get the first
// one's response: the 99 wait (until every one of them is waiting, the
// first is held at the upstream's door) and get the replay.
func TestIdempotentWaitGetsTheFirstResponse(t *testing.T) {
	for _, useRedis := range []bool{false, true} {
		t.Run(fmt.Sprint("redis=", useRedis), func(t *testing.T) {
			up := newPayments()
			up.hold = make(chan struct{})
			local, err := idempotency.NewLocal(time.Now, idempotency.LocalConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var store idempotency.Store = local
			if useRedis {
				store, _ = redisIdem(t)
			}
			counted := &waitCounter{Store: store, waiting: map[context.Context]bool{}, all: make(chan struct{})}
			const n = 100
			counted.want = n - 1
			base, _ := idemGateway(t, up, counted, true, 10*time.Second)
			client := clienttest.New(t, n)
			results := make(chan response, n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					r, err := tryDo(client, http.MethodPost, base+"/pay", `{"amount":7}`, payHeader("order-w"))
					if err != nil {
						t.Error(err)
					}
					results <- r
				})
			}
			<-up.arrived
			select {
			case <-counted.all:
			case <-time.After(10 * time.Second):
				t.Fatalf("waiters: %d, want %d", counted.count(), n-1)
			}
			close(up.hold)
			wg.Wait()
			close(results)
			replayed, original := 0, 0
			var body string
			for r := range results {
				if r.status != http.StatusCreated {
					t.Fatalf("got %d %s, want 201", r.status, r.body)
				}
				if body == "" {
					body = string(r.body)
				}
				if string(r.body) != body {
					t.Fatalf("bodies differ: %q and %q", r.body, body)
				}
				if r.header.Get(hdrReplayed) == "true" {
					replayed++
				} else {
					original++
				}
			}
			if original != 1 || replayed != n-1 || up.hits.Load() != 1 {
				t.Fatalf("original %d, replayed %d, upstream hits %d; want 1, %d, 1", original, replayed, up.hits.Load(), n-1)
			}
		})
	}
}

// waitCounter counts the requests waiting in Wait (distinct contexts) and
// closes all once want of them have waited.
type waitCounter struct {
	idempotency.Store
	mu      sync.Mutex
	waiting map[context.Context]bool
	want    int
	all     chan struct{}
}

func (w *waitCounter) Wait(ctx context.Context, key string) error {
	w.mu.Lock()
	if !w.waiting[ctx] {
		w.waiting[ctx] = true
		if len(w.waiting) == w.want {
			close(w.all)
		}
	}
	w.mu.Unlock()
	return w.Store.Wait(ctx, key)
}

func (w *waitCounter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}

// A waiter whose client hangs up leaves at once (logged as 499); the first
// request is not disturbed, and its record is kept.
func TestIdempotentWaiterLeaves(t *testing.T) {
	up := newPayments()
	up.hold = make(chan struct{})
	rec := newLogRecorder()
	yaml := strings.ReplaceAll(strings.ReplaceAll(idemYAML, "UPSTREAM", newUpstream(t, up).URL), "LOCKTTL", "10s")
	snap := compileYAML(t, strings.ReplaceAll(yaml, " WAIT", ", on_conflict: wait, max_wait: 30s"))
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{log: rec})
	client := srv.Client()
	first := make(chan response, 1)
	go func() {
		r, err := tryDo(client, http.MethodPost, srv.URL+"/pay", "{}", payHeader("k"))
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	<-up.arrived
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		req.Header = payHeader("k")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		left <- err
	}()
	// The waiter is waiting once the gateway has it; it cannot be seen, so
	// the hang-up may come before or during the wait: either way it leaves.
	cancel()
	if err := <-left; err == nil {
		t.Fatal("the cancelled request got a response")
	}
	close(up.hold)
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first: %d, want 201", r.status)
	}
	if r := pay(t, client, srv.URL, "k", "{}"); r.header.Get(hdrReplayed) != "true" {
		t.Fatalf("after: %d replayed %q, want the replay", r.status, r.header.Get(hdrReplayed))
	}
}

// Bad uses of the key: a missing key where one is required is 400, and so
// are a key sent twice and one that is too long or not visible ASCII; the
// same key with another body or query is 422 and reaches nothing (another
// method or path is another scope). A method outside methods (GET) passes
// without a key.
func TestIdempotentBadRequests(t *testing.T) {
	up := newPayments()
	base, _ := idemGateway(t, up, nil, false, 10*time.Second)
	c := clienttest.New(t, 4)
	if r := pay(t, c, base, "k1", `{"amount":1}`); r.status != http.StatusCreated {
		t.Fatalf("first: %d", r.status)
	}
	for _, tc := range []struct {
		name   string
		method string
		path   string
		header http.Header
		body   string
		status int
	}{
		{"missing key", "POST", "/pay", http.Header{}, "{}", 400},
		{"key twice", "POST", "/pay", http.Header{"Idempotency-Key": {"a", "b"}}, "{}", 400},
		{"key too long", "POST", "/pay", payHeader(strings.Repeat("k", 256)), "{}", 400},
		{"key with a space", "POST", "/pay", payHeader("a b"), "{}", 400},
		{"key not ASCII", "POST", "/pay", payHeader("clé"), "{}", 400},
		{"other body", "POST", "/pay", payHeader("k1"), `{"amount":2}`, 422},
		{"other query", "POST", "/pay?x=1", payHeader("k1"), `{"amount":1}`, 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.hits.Load()
			r := do(t, c, tc.method, base+tc.path, strings.NewReader(tc.body), tc.header)
			if r.status != tc.status {
				t.Fatalf("got %d %s, want %d", r.status, r.body, tc.status)
			}
			if e := decodeError(t, r); e.Code != tc.status*100 {
				t.Fatalf("code %d, want %d", e.Code, tc.status*100)
			}
			if up.hits.Load() != before {
				t.Fatal("the request reached the upstream")
			}
		})
	}
	if r := do(t, c, "GET", base+"/pay", nil, nil); r.status != http.StatusCreated {
		t.Fatalf("GET without a key: %d, want it forwarded (201)", r.status)
	}
}

// A 5xx and an upstream that fails are not stored: the key is free again
// and the retry is forwarded; the first success is then kept.
func TestIdempotentFailuresAreNotStored(t *testing.T) {
	for _, useRedis := range []bool{false, true} {
		t.Run(fmt.Sprint("redis=", useRedis), func(t *testing.T) {
			up := newPayments()
			var store idempotency.Store
			if useRedis {
				store, _ = redisIdem(t)
			}
			var fail atomic.Bool
			wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if fail.Load() {
					panic(http.ErrAbortHandler) // the connection drops: a failed upstream
				}
				up.ServeHTTP(w, r)
			})
			base, _ := idemGateway(t, wrapped, store, false, 10*time.Second)
			c := clienttest.New(t, 4)
			up.status.Store(503)
			if r := pay(t, c, base, "k", "{}"); r.status != 503 {
				t.Fatalf("first: %d, want the upstream's 503", r.status)
			}
			fail.Store(true)
			if r := pay(t, c, base, "k", "{}"); r.status != http.StatusBadGateway {
				t.Fatalf("second: %d, want 502", r.status)
			}
			fail.Store(false)
			up.status.Store(0)
			r := pay(t, c, base, "k", "{}")
			if r.status != http.StatusCreated || r.header.Get(hdrReplayed) != "" {
				t.Fatalf("retry: %d replayed %q, want a fresh 201", r.status, r.header.Get(hdrReplayed))
			}
			if again := pay(t, c, base, "k", "{}"); again.header.Get(hdrReplayed) != "true" || string(again.body) != string(r.body) {
				t.Fatalf("after the success: %d %s, want its replay", again.status, again.body)
			}
			if got := up.written("k"); got != 2 { // the 503 (written, then failed) and the success
				t.Fatalf("writes %d, want 2", got)
			}
		})
	}
}

// A 4xx is a result and is kept; a response larger than
// max_response_bytes is not replayed, but the request is known done: its
// duplicates get 409 and never reach the upstream.
func TestIdempotentKeptResults(t *testing.T) {
	up := newPayments()
	base, _ := idemGateway(t, up, nil, false, 10*time.Second)
	c := clienttest.New(t, 4)
	up.status.Store(402)
	if r := pay(t, c, base, "declined", "{}"); r.status != 402 {
		t.Fatal(r.status)
	}
	if r := pay(t, c, base, "declined", "{}"); r.status != 402 || r.header.Get(hdrReplayed) != "true" {
		t.Fatalf("402 again: %d replayed %q, want the replay", r.status, r.header.Get(hdrReplayed))
	}
	up.status.Store(0)
	up.big.Store(5000) // over max_response_bytes: 4096
	if r := pay(t, c, base, "big", "{}"); r.status != http.StatusCreated || len(r.body) != 5000 {
		t.Fatalf("big: %d, %d bytes", r.status, len(r.body))
	}
	r := pay(t, c, base, "big", "{}")
	if e := decodeError(t, r); r.status != http.StatusConflict || !strings.Contains(e.Message, "status 201") {
		t.Fatalf("big again: %d %q, want 409 saying it completed with 201", r.status, e.Message)
	}
	if got := up.hits.Load(); got != 2 {
		t.Fatalf("upstream hits %d, want 2", got)
	}
}

// Only the gateway sets the fencing token: a client's own is replaced, and
// a request without an idempotency key carries none. Each new holder of a
// key gets a larger token.
func TestIdempotentFencingHeader(t *testing.T) {
	up := newPayments()
	base, _ := idemGateway(t, up, nil, false, 10*time.Second)
	c := clienttest.New(t, 4)
	h := payHeader("f1")
	h.Set("X-Fencing-Token", "999999999999999999")
	do(t, c, "POST", base+"/pay", strings.NewReader("{}"), h)
	first := <-up.arrived
	if first <= 0 || first == 999999999999999999 {
		t.Fatalf("fence %d: want the gateway's own", first)
	}
	pay(t, c, base, "f2", "{}")
	if second := <-up.arrived; second <= first {
		t.Fatalf("second fence %d, want > %d", second, first)
	}
	do(t, c, "GET", base+"/pay", nil, http.Header{"X-Fencing-Token": {"5"}})
	if got := <-up.arrived; got != 0 {
		t.Fatalf("GET carried fence %d, want none", got)
	}
}

// The seed's A/B timeline through the gateway, on Redis: A's lock expires
// while A is upstream (forced: deleted), B takes the key with a larger
// fencing token and writes; A's late write is refused by the upstream,
// which remembers B's token; A's answer is not kept, B's is replayed.
func TestIdempotentStaleHolderRefusedByFencing(t *testing.T) {
	store, client := redisIdem(t)
	up := newPayments()
	up.hold = make(chan struct{})
	base, _ := idemGateway(t, up, store, false, 10*time.Second)
	c := clienttest.New(t, 4)
	aDone := make(chan response, 1)
	go func() {
		r, err := tryDo(c, http.MethodPost, base+"/pay", `{"amount":9}`, payHeader("order-ab"))
		if err != nil {
			t.Error(err)
		}
		aDone <- r
	}()
	fenceA := <-up.arrived
	lock, _ := redislock.Keys("idem:route:pay\x00ip:127.0.0.1/32\x00POST\x00/pay\x00order-ab")
	if n, err := client.Del(context.Background(), lock).Result(); err != nil || n != 1 {
		t.Fatalf("forcing the expiry of %s: %d, %v", lock, n, err)
	}
	bDone := make(chan response, 1)
	go func() {
		r, err := tryDo(c, http.MethodPost, base+"/pay", `{"amount":9}`, payHeader("order-ab"))
		if err != nil {
			t.Error(err)
		}
		bDone <- r
	}()
	fenceB := <-up.arrived
	if fenceB <= fenceA {
		t.Fatalf("B's fence %d, want > A's %d", fenceB, fenceA)
	}
	// Both wait at the door; whichever the upstream lets in first, B's
	// token is the largest it has seen, as if B's write came first.
	up.mu.Lock()
	up.fences["order-ab"] = fenceB
	up.mu.Unlock()
	close(up.hold)
	a, b := <-aDone, <-bDone
	if a.status != http.StatusConflict || !strings.Contains(string(a.body), "stale fencing token") {
		t.Fatalf("A: %d %s, want the upstream's 409 for a stale token", a.status, a.body)
	}
	if b.status != http.StatusCreated {
		t.Fatalf("B: %d %s, want 201", b.status, b.body)
	}
	r := pay(t, c, base, "order-ab", `{"amount":9}`)
	if r.status != http.StatusCreated || string(r.body) != string(b.body) || r.header.Get(hdrReplayed) != "true" {
		t.Fatalf("after: %d %s, want B's response replayed", r.status, r.body)
	}
	if got := up.written("order-ab"); got != 1 {
		t.Fatalf("payments written %d, want 1", got)
	}
}

// A replay gives back what it reserved: on a route with an in-flight limit
// of 1, many replays in a row leave the slot free for the next payment.
func TestIdempotentReplayHoldsNoSlot(t *testing.T) {
	up := newPayments()
	yaml := `
routes:
  - name: pay
    upstream: "` + newUpstream(t, up).URL + `"
    match: {path_prefix: /pay}
    idempotency: {}
    policies: [one]
policies:
  one: {key: ip, algorithm: concurrency, limit: 1}
`
	srv, _ := newGateway(t, compileYAML(t, yaml), newEngine(t, newTestClock()), gatewayOpts{})
	c := srv.Client()
	for i := range 50 {
		r := pay(t, c, srv.URL, "same", "{}")
		if r.status != http.StatusCreated || (i > 0) != (r.header.Get(hdrReplayed) == "true") {
			t.Fatalf("request %d: %d replayed %q", i, r.status, r.header.Get(hdrReplayed))
		}
	}
	if r := pay(t, c, srv.URL, "other", "{}"); r.status != http.StatusCreated || r.header.Get(hdrReplayed) != "" {
		t.Fatalf("a new payment after 49 replays: %d, want a fresh 201", r.status)
	}
}

// tryDo is do without a *testing.T, for goroutines.
func tryDo(c *http.Client, method, target, body string, header http.Header) (response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header = header.Clone()
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}, err
}
