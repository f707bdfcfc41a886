package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
)

// recordingObserver keeps what the proxy reports, as the metrics would.
type recordingObserver struct {
	mu       sync.Mutex
	requests map[string]int // route/outcome
	policies map[string]int // route/policy/outcome
	backends map[string]int
	upstream map[string]int // route/status
	inFlight atomic.Int64
	charges  map[string]int64 // tenant/model -> tokens
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{requests: map[string]int{}, policies: map[string]int{}, backends: map[string]int{},
		upstream: map[string]int{}, charges: map[string]int64{}}
}

func (o *recordingObserver) Request(route, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests[route+"/"+outcome]++
}

func (o *recordingObserver) Policy(route, policy, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.policies[route+"/"+policy+"/"+outcome]++
}

func (o *recordingObserver) Decision(backend string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.backends[backend]++
}

func (o *recordingObserver) Upstream(route string, status int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.upstream[fmt.Sprintf("%s/%d", route, status)]++
}

func (o *recordingObserver) InFlight(delta int) { o.inFlight.Add(int64(delta)) }

func (o *recordingObserver) LLMCharge(tenant, model string, tokens, _ int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.charges[tenant+"/"+model] += tokens
}

func (o *recordingObserver) get(m map[string]int, key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return m[key]
}

// sharedEngine returns an engine whose shared policies live on a fresh
// redis-server.
func sharedEngine(t *testing.T) *limiter.Engine {
	t.Helper()
	s := redistest.Start(t)
	client, err := redisclient.New(redisclient.Options{Addrs: []string{s.Addr()}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return engineOn(t, client)
}

// engineOn returns an engine (one instance of the gateway's limiter) whose
// shared policies live on client's Redis.
func engineOn(t *testing.T, client redis.UniversalClient) *limiter.Engine {
	t.Helper()
	r, err := redislimit.New(client, redislimit.Config{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	e, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), r)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A shadow policy never blocks but counts: 64 clients send 200 requests
// past its limit of 5; every one is forwarded, its would-be 429s are
// reported (metrics and access log), the enforced policy beside it counts
// each request exactly once (its remaining is its quota minus the
// requests), and the client's rate-limit headers never show the shadow
// policy. Local and on Redis.
func TestShadowPolicyNeverBlocksButCounts(t *testing.T) {
	for _, algo := range []string{"token_bucket", "gcra"} {
		t.Run(algo, func(t *testing.T) {
			var engine *limiter.Engine
			redisLine := ""
			if algo == "gcra" {
				engine = sharedEngine(t)
				redisLine = "redis: {addrs: ['127.0.0.1:1']}\n" // compiled only; the engine brings its own
			} else {
				engine = newEngine(t, newTestClock())
			}
			var hits atomic.Int64
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
			yaml := redisLine + `
log: {access: true}
routes:
  - {name: r, upstream: "` + up.URL + `", match: {path_prefix: /}, policies: [enforced, trial]}
policies:
  enforced: {key: "header:X-Tenant", algorithm: ALGO, rate: 1000, per: 1h}
  trial: {key: "header:X-Tenant", algorithm: ALGO, rate: 5, per: 1h, mode: shadow}
`
			obs := newRecordingObserver()
			var logBuf syncBuffer
			srv, h := newGateway(t, compileYAML(t, strings.ReplaceAll(yaml, "ALGO", algo)), engine, gatewayOpts{})
			h.metrics = obs
			h.access = slog.New(slog.NewJSONHandler(&logBuf, nil))
			c := clienttest.New(t, 64)
			const n = 200
			var wg sync.WaitGroup
			var bad atomic.Int64
			var sawTrial atomic.Bool
			for range n {
				wg.Go(func() {
					r, err := tryDo(c, "GET", srv.URL+"/x", "", http.Header{"X-Tenant": {"acme"}})
					if err != nil || r.status != http.StatusOK {
						bad.Add(1)
						return
					}
					if strings.Contains(r.header.Get("RateLimit-Policy"), "trial") || strings.Contains(r.header.Get("RateLimit"), "trial") {
						sawTrial.Store(true)
					}
				})
			}
			wg.Wait()
			if bad.Load() != 0 || hits.Load() != n {
				t.Fatalf("%d requests not 200, upstream got %d; want 0 and %d", bad.Load(), hits.Load(), n)
			}
			if sawTrial.Load() {
				t.Fatal("a response's RateLimit headers named the shadow policy")
			}
			if got := obs.get(obs.policies, "r/trial/shadow_limited"); got != n-5 {
				t.Fatalf("trial shadow_limited %d, want %d", got, n-5)
			}
			if got := obs.get(obs.requests, "r/shadow_limited") + obs.get(obs.requests, "r/allowed"); got != n || obs.get(obs.requests, "r/shadow_limited") != n-5 {
				t.Fatalf("requests: %v", obs.requests)
			}
			// The enforced policy counted each request once.
			r := do(t, c, "GET", srv.URL+"/x", nil, http.Header{"X-Tenant": {"acme"}})
			if got := r.header.Get("X-RateLimit-Remaining"); got != fmt.Sprint(1000-n-1) {
				t.Fatalf("enforced remaining %s, want %d", got, 1000-n-1)
			}
			if lines := logBuf.count(`"shadow_limited":"trial"`); lines != n-5+1 {
				t.Fatalf("access lines with shadow_limited: %d, want %d", lines, n-5+1)
			}
			if obs.inFlight.Load() != 0 {
				t.Fatalf("in flight %d after the flood, want 0", obs.inFlight.Load())
			}
		})
	}
}

// mode: shadow at the top puts every policy in shadow: a policy of 1 a
// minute lets 20 requests through.
func TestGlobalShadowMode(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	snap := compileYAML(t, `
mode: shadow
routes:
  - {name: r, upstream: "`+up.URL+`", match: {path_prefix: /}, policies: [tight]}
policies:
  tight: {key: ip, rate: 1, per: 1m}
`)
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	for i := range 20 {
		if r := do(t, srv.Client(), "GET", srv.URL+"/", nil, nil); r.status != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i, r.status)
		}
	}
}

// turnTimers arms the waits of delayed requests on a fake clock and says
// when one is armed.
type turnTimers struct {
	manualTimers
	armed chan time.Duration
}

func (tt *turnTimers) afterFunc(d time.Duration, f func()) timer {
	tm := tt.manualTimers.afterFunc(d, f)
	tt.armed <- d
	return tm
}

func waitArmed(t *testing.T, tt *turnTimers) time.Duration {
	t.Helper()
	select {
	case d := <-tt.armed:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no request started waiting for its turn")
		return 0
	}
}

// on_limit: delay, on a fake clock: a request over the limit waits for its
// turn and is admitted; past max_waiters one gets 429 at once; a wait longer
// than max_delay is a 429 at once; a waiter whose client hangs up leaves
// the queue and never reaches the upstream.
func TestDelayInsteadOfReject(t *testing.T) {
	clock := newTestClock()
	var hits atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	snap := compileYAML(t, `
routes:
  - {name: r, upstream: "`+up.URL+`", match: {path_prefix: /r}, policies: [paced]}
  - {name: short, upstream: "`+up.URL+`", match: {path_prefix: /short}, policies: [impatient]}
policies:
  paced: {key: ip, rate: 1, per: 1s, burst: 1, on_limit: delay, max_delay: 2s, max_waiters: 2}
  impatient: {key: ip, rate: 1, per: 1s, burst: 1, on_limit: delay, max_delay: 500ms}
`)
	obs := newRecordingObserver()
	srv, h := newGateway(t, snap, newEngine(t, clock), gatewayOpts{})
	tt := &turnTimers{armed: make(chan time.Duration, 16)}
	h.turnAfter, h.metrics = tt.afterFunc, obs
	c := clienttest.New(t, 8)
	get := func(path string) <-chan response {
		ch := make(chan response, 1)
		go func() {
			r, err := tryDo(c, "GET", srv.URL+path, "", nil)
			if err != nil {
				t.Error(err)
			}
			ch <- r
		}()
		return ch
	}
	if r := <-get("/r"); r.status != http.StatusOK {
		t.Fatalf("first: %d", r.status)
	}
	second := get("/r")
	if d := waitArmed(t, tt); d != time.Second {
		t.Fatalf("the wait is %s, want the 1s until the next token", d)
	}
	third := get("/r")
	waitArmed(t, tt)
	// Two wait: a third waiter is one too many.
	if r := <-get("/r"); r.status != http.StatusTooManyRequests {
		t.Fatalf("past max_waiters: %d, want 429", r.status)
	}
	clock.Advance(time.Second)
	tt.advance(time.Second) // both wake; one token: one passes, the other waits again
	waitArmed(t, tt)
	clock.Advance(time.Second)
	tt.advance(time.Second)
	for i, ch := range []<-chan response{second, third} {
		if r := <-ch; r.status != http.StatusOK {
			t.Fatalf("waiter %d: %d, want 200 after its turn", i, r.status)
		}
	}
	if got := obs.get(obs.policies, "r/paced/delayed"); got != 2 {
		t.Fatalf("delayed reported %d times, want 2", got)
	}
	// A turn further away than max_delay: 429 at once, no wait armed.
	if r := <-get("/short"); r.status != http.StatusOK {
		t.Fatal(r.status)
	}
	if r := <-get("/short"); r.status != http.StatusTooManyRequests {
		t.Fatalf("past max_delay: %d, want 429", r.status)
	}
	// A waiter whose client hangs up leaves at once.
	before := hits.Load()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/r", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitArmed(t, tt)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the hung-up request got an answer")
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.waiters.count() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hung-up waiter is still queued")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline, not ordering
	}
	if hits.Load() != before {
		t.Fatal("the hung-up waiter reached the upstream")
	}
}

// syncBuffer is a bytes.Buffer safe for the access log's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func (b *syncBuffer) lines() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// The access log: one line per request with route, decision, policy,
// status, duration and upstream time; never the API key, the Authorization
// header or the query string; sampled when asked, but a refusal is always
// kept.
func TestAccessLog(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	yaml := `
log: {access: true, access_sample: SAMPLE}
tenants:
  header: Authorization
  keys: {sk-secret-1234: {tenant: acme, plan: free}}
routes:
  - {name: r, upstream: "` + up.URL + `", match: {path_prefix: /}, policies: [per-tenant]}
policies:
  per-tenant: {key: tenant, rate: 3, per: 1m, on_missing_key: reject}
`
	for _, sample := range []string{"1", "0.000001"} {
		t.Run("sample="+sample, func(t *testing.T) {
			var buf syncBuffer
			srv, h := newGateway(t, compileYAML(t, strings.ReplaceAll(yaml, "SAMPLE", sample)), newEngine(t, newTestClock()), gatewayOpts{})
			h.access = slog.New(slog.NewJSONHandler(&buf, nil))
			hdr := http.Header{"Authorization": {"Bearer sk-secret-1234"}}
			for range 5 {
				do(t, srv.Client(), "GET", srv.URL+"/pay?token=hunter2", nil, hdr)
			}
			lines := buf.lines()
			want := 5
			if sample != "1" {
				want = 2 // the two 429s; the admitted ones are (almost surely) sampled out
			}
			if len(lines) != want {
				t.Fatalf("%d access lines, want %d:\n%s", len(lines), want, buf.buf.String())
			}
			last := lines[len(lines)-1]
			for k, v := range map[string]any{"msg": "request", "route": "r", "status": float64(429), "decision": "limited",
				"policy": "per-tenant", "tenant": "acme", "path": "/pay", "method": "GET"} {
				if last[k] != v {
					t.Fatalf("access line %v: %s = %v, want %v", last, k, last[k], v)
				}
			}
			if _, ok := last["duration_ms"]; !ok {
				t.Fatalf("no duration_ms in %v", last)
			}
			if sample == "1" {
				if _, ok := lines[0]["upstream_ms"]; !ok || lines[0]["upstream_status"] != float64(200) {
					t.Fatalf("admitted line %v: want upstream_status 200 and upstream_ms", lines[0])
				}
			}
			for _, secret := range []string{"sk-secret-1234", "hunter2", "Bearer"} {
				if n := buf.count(secret); n != 0 {
					t.Fatalf("the access log holds %q %d times", secret, n)
				}
			}
		})
	}
}

// on_limit: delay on a shared algorithm: 8 concurrent requests on a gcra
// key of 4/s with a burst of 1 are all admitted, 7 of them after waiting
// their turn on Redis (a token every 250ms: a request would have to start
// that late to find one without waiting).
func TestDelayOnRedis(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	snap := compileYAML(t, `
redis: {addrs: ['127.0.0.1:1']}
routes:
  - {name: r, upstream: "`+up.URL+`", match: {path_prefix: /}, policies: [paced]}
policies:
  paced: {key: ip, algorithm: gcra, rate: 4, per: 1s, burst: 1, on_limit: delay, max_delay: 5s, max_waiters: 10}
`)
	obs := newRecordingObserver()
	srv, h := newGateway(t, snap, sharedEngine(t), gatewayOpts{})
	h.metrics = obs
	c := clienttest.New(t, 8)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 8 {
		wg.Go(func() {
			if r, err := tryDo(c, "GET", srv.URL+"/", "", nil); err == nil && r.status == http.StatusOK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 8 {
		t.Fatalf("admitted %d of 8, want all after their turn", ok.Load())
	}
	if got := obs.get(obs.policies, "r/paced/delayed"); got != 7 {
		t.Fatalf("delayed %d, want 7 (one token at once, then one per 250ms)", got)
	}
}

// What an llm call cost is reported per tenant and model: the tokens it was
// settled to.
func TestLLMChargeReported(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 20}))
	snap := compileYAML(t, `
tenants:
  keys: {sk-1: {tenant: acme, plan: free}}
routes:
  - {name: llm, upstream: "`+up.URL+`", match: {path_prefix: /v1/}, llm: openai, policies: [tokens]}
policies:
  tokens: {key: tenant, cost: tokens, rate: 100000, per: 1h}
`)
	obs := newRecordingObserver()
	srv, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	h.metrics = obs
	r := do(t, srv.Client(), "POST", srv.URL+"/v1/chat/completions", strings.NewReader(strings.Replace(chatBody, "%s", "", 1)),
		http.Header{"X-Api-Key": {"sk-1"}, "Content-Type": {"application/json"}})
	var got struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		obs.mu.Lock()
		charged := obs.charges["acme/gpt-4o-mini"]
		obs.mu.Unlock()
		if charged == got.Usage.TotalTokens {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("charged %d tokens to acme/gpt-4o-mini, want the usage %d", charged, got.Usage.TotalTokens)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}
