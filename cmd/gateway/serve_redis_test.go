package main

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestServeRedisConfig runs gateway.redis.yaml against a real redis-server:
// shared limits while Redis is up, each failure mode once it is killed, and
// enforcement through Redis again after a restart. Each case starts a Redis
// and a gateway of its own, so any one runs alone, e.g.
// -run 'TestServeRedisConfig/redis_killed:_login'.
func TestServeRedisConfig(t *testing.T) {
	tests := []struct {
		name string
		test func(*testing.T, *redisGateway)
	}{
		{"default route: 10 then 429", testRedisDefaultRoute},
		{"api route: three policies", testRedisAPIRoute},
		{"login: sliding window 10 then 429", testRedisLogin},
		{"redis killed: login fails closed", testRedisKilledLoginFailsClosed},
		{"redis killed: per-ip enforces its local share", testRedisKilledPerIPLocalShare},
		{"redis killed: tenant-hourly fails open", testRedisKilledTenantHourlyFailsOpen},
		{"redis restarted: enforcement back through redis", testRedisRestarted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.test(t, startRedisGateway(t)) })
	}
}

// redisGateway is one gateway on gateway.redis.yaml with a redis-server of
// its own, and a client to talk to it.
type redisGateway struct {
	*gateway
	redis *redistest.Server
	c     *http.Client
}

// startRedisGateway starts a redis-server and a gateway on gateway.redis.yaml
// that uses it. Both end with the test, which then fails if a goroutine was
// left behind.
func startRedisGateway(t *testing.T) *redisGateway {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	// Registered first, so it runs after every other cleanup (gateway
	// drained, client closed, Redis killed).
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })

	s := redistest.Start(t)
	path := writeRedisConfig(t)
	t.Setenv("GATEWAY_REDIS_ADDRS", s.Addr())
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	// The file's 30ms suits a production Redis; here, under -race beside
	// other packages' tests, a decision can take longer, and would be
	// answered by the local fallback as if Redis had failed. Killing Redis
	// refuses connections at once, so the outage cases do not wait on it.
	t.Setenv("GATEWAY_REDIS_TIMEOUT", "250ms")
	g := startGateway(t, "gateway", path)
	if m := g.waitLog(t, 0, regexp.MustCompile(`gateway listening.* redis=(\S+)`)); m[1] != "true" {
		t.Fatalf("listening line says redis=%s, want true", m[1])
	}
	return &redisGateway{gateway: g, redis: s, c: newTestClient(t)}
}

// xff is the header that makes the gateway see a client at ip.
func xff(ip string) []string { return []string{"X-Forwarded-For", ip} }

// loginsWhileDown is how many logins killRedis sends: more than
// redis.breaker_failures (3), so the breaker opens.
const loginsWhileDown = 8

// killRedis kills the gateway's Redis and sends logins from one client
// until the gateway's circuit breaker opened, as it does once an outage is
// noticed. Every login must fail closed (503); their answers are returned.
func (g *redisGateway) killRedis(t *testing.T) []reply {
	t.Helper()
	killedAt := g.logLen()
	g.redis.Kill()
	var rs []reply
	for i := range loginsWhileDown {
		r := mustSend(t, g.c, "POST", g.base+"/login", xff("203.0.113.20")...)
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("request %d: got %d %s, want 503", i+1, r.status, r.body)
		}
		rs = append(rs, r)
	}
	g.waitLog(t, killedAt, regexp.MustCompile(`circuit breaker opened`))
	return rs
}

func testRedisDefaultRoute(t *testing.T, g *redisGateway) {
	for i := range 12 {
		r := mustSend(t, g.c, "GET", g.base+"/", xff("203.0.113.1")...)
		if got, want := r.header.Get("RateLimit-Policy"), `"per-ip";q=10;w=60`; got != want {
			t.Fatalf("request %d: got RateLimit-Policy %q, want %q", i+1, got, want)
		}
		if got := r.header.Get("X-RateLimit-Limit"); got != "10" {
			t.Fatalf("request %d: got X-RateLimit-Limit %q, want 10", i+1, got)
		}
		if i < 10 {
			if r.status != http.StatusOK {
				t.Fatalf("request %d: got %d %s, want 200", i+1, r.status, r.body)
			}
			want := fmt.Sprintf(`"per-ip";r=%d;t=`, 9-i)
			if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, want) {
				t.Fatalf("request %d: got RateLimit %q, want it to start with %q", i+1, got, want)
			}
			if got, want := r.header.Get("X-RateLimit-Remaining"), strconv.Itoa(9-i); got != want {
				t.Fatalf("request %d: got X-RateLimit-Remaining %q, want %q", i+1, got, want)
			}
			continue
		}
		// The 11th is Redis's denial, the 12th the denial cache's.
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("request %d: got %d %s, want 429", i+1, r.status, r.body)
		}
		e := r.errorBody(t)
		if e.Code != 42900 || e.Policy != "per-ip" || e.RetryAfterMs == nil || *e.RetryAfterMs <= 0 || *e.RetryAfterMs > 6000 {
			t.Fatalf("request %d: got body %s, want code 42900, policy per-ip, retry_after_ms in (0, 6000]", i+1, r.body)
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 6 {
			t.Fatalf("request %d: got Retry-After %q, want 1..6 (one token per 6s)", i+1, r.header.Get("Retry-After"))
		}
		if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, `"per-ip";r=0;t=`) {
			t.Fatalf("request %d: got RateLimit %q, want r=0", i+1, got)
		}
		if got := r.header.Get("X-RateLimit-Remaining"); got != "0" {
			t.Fatalf("request %d: got X-RateLimit-Remaining %q, want 0", i+1, got)
		}
	}
}

func testRedisAPIRoute(t *testing.T, g *redisGateway) {
	r := mustSend(t, g.c, "GET", g.base+"/v1/models", append(xff("203.0.113.2"), "X-API-Key", "sk-demo-free")...)
	if r.status != http.StatusOK {
		t.Fatalf("got %d %s, want 200", r.status, r.body)
	}
	if got, want := r.header.Get("RateLimit-Policy"), `"per-ip";q=10;w=60, "tenant-rps";q=5;w=1, "tenant-hourly";q=1000;w=3600`; got != want {
		t.Fatalf("got RateLimit-Policy %q, want %q", got, want)
	}
	rl := strings.Split(r.header.Get("RateLimit"), ", ")
	want := []string{`"per-ip";r=9;`, `"tenant-rps";r=4;`, `"tenant-hourly";r=999;`}
	if len(rl) != len(want) {
		t.Fatalf("got RateLimit %q, want %d items", r.header.Get("RateLimit"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(rl[i], w) {
			t.Fatalf("got RateLimit item %q, want it to start with %q", rl[i], w)
		}
	}
}

func testRedisLogin(t *testing.T, g *redisGateway) {
	for i := range 11 {
		r := mustSend(t, g.c, "POST", g.base+"/login", xff("203.0.113.3")...)
		want := http.StatusOK
		if i >= 10 {
			want = http.StatusTooManyRequests
		}
		if r.status != want {
			t.Fatalf("request %d: got %d %s, want %d", i+1, r.status, r.body, want)
		}
		if got, want := r.header.Get("RateLimit-Policy"), `"login-attempts";q=10;w=60`; got != want {
			t.Fatalf("request %d: got RateLimit-Policy %q, want %q", i+1, got, want)
		}
		if want == http.StatusTooManyRequests {
			if e := r.errorBody(t); e.Code != 42900 || e.Policy != "login-attempts" {
				t.Fatalf("request %d: got body %s, want code 42900 for policy login-attempts", i+1, r.body)
			}
		}
	}
}

func testRedisKilledLoginFailsClosed(t *testing.T, g *redisGateway) {
	var lat []time.Duration
	for i, r := range g.killRedis(t) {
		lat = append(lat, r.took)
		if e := r.errorBody(t); e.Code != 50300 || e.Policy != "login-attempts" {
			t.Fatalf("request %d: got body %s, want code 50300 for policy login-attempts", i+1, r.body)
		}
		if r.took > redisTimeout+latencySlack {
			t.Fatalf("request %d took %s, want at most the timeout %s + %s", i+1, r.took, redisTimeout, latencySlack)
		}
		if i == 0 {
			t.Logf("503 answer: Retry-After %q, RateLimit-Policy %q, body %s", r.header.Get("Retry-After"), r.header.Get("RateLimit-Policy"), bytes.TrimSpace(r.body))
		}
	}
	t.Logf("redis killed, on_redis_error=deny: 503 latencies (client side, HTTP included) %s; max %s, timeout %s",
		durations(lat), slices.Max(lat).Round(10*time.Microsecond), redisTimeout)
}

func testRedisKilledPerIPLocalShare(t *testing.T, g *redisGateway) {
	g.killRedis(t)
	// local_share 0.34 of burst 10: 3 for this instance. A client Redis
	// never saw, so nothing but the fallback bucket decides.
	var lat []time.Duration
	for i := range 6 {
		r := mustSend(t, g.c, "GET", g.base+"/", xff("203.0.113.30")...)
		lat = append(lat, r.took)
		want := http.StatusOK
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if r.status != want {
			t.Fatalf("request %d: got %d %s, want %d (local share 3 of burst 10)", i+1, r.status, r.body, want)
		}
		if want == http.StatusTooManyRequests {
			if e := r.errorBody(t); e.Code != 42900 || e.Policy != "per-ip" {
				t.Fatalf("request %d: got body %s, want code 42900 for policy per-ip", i+1, r.body)
			}
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("request %d: 429 without Retry-After", i+1)
			}
			if i == 3 {
				t.Logf("local-share 429: RateLimit-Policy %q, RateLimit %q, Retry-After %q", r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"), r.header.Get("Retry-After"))
			}
		}
		if r.took > redisTimeout+latencySlack {
			t.Fatalf("request %d took %s, want at most %s + %s", i+1, r.took, redisTimeout, latencySlack)
		}
	}
	t.Logf("redis killed, on_redis_error=local: 3 admitted then 429; latencies %s", durations(lat))
}

func testRedisKilledTenantHourlyFailsOpen(t *testing.T, g *redisGateway) {
	g.killRedis(t)
	// The pro plan's tenant-rps share (17/s) leaves per-ip's share (3)
	// as the only limit that can deny; tenant-hourly must never.
	var lat []time.Duration
	for i := range 4 {
		r := mustSend(t, g.c, "GET", g.base+"/v1/models", append(xff("203.0.113.40"), "X-API-Key", "sk-demo-pro")...)
		lat = append(lat, r.took)
		if i < 3 {
			if r.status != http.StatusOK {
				t.Fatalf("request %d: got %d %s, want 200 (tenant-hourly allows while redis is down)", i+1, r.status, r.body)
			}
			if got := r.header.Get("RateLimit"); !strings.Contains(got, `"tenant-hourly";r=100000;`) {
				t.Fatalf("request %d: got RateLimit %q, want tenant-hourly failed open with its full quota", i+1, got)
			}
			continue
		}
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("request %d: got %d %s, want 429 from per-ip's local share", i+1, r.status, r.body)
		}
		if e := r.errorBody(t); e.Policy != "per-ip" {
			t.Fatalf("request %d: got body %s, want policy per-ip to deny, not tenant-hourly", i+1, r.body)
		}
	}
	t.Logf("redis killed, on_redis_error=allow (tenant-hourly): admitted; latencies %s", durations(lat))
}

func testRedisRestarted(t *testing.T, g *redisGateway) {
	g.killRedis(t)
	restartedAt := g.logLen()
	g.redis.Restart()
	back := time.Now()
	var first reply
	polls := 0
	tick := time.NewTicker(5 * time.Millisecond) // paces the probing requests
	defer tick.Stop()
	for {
		first = mustSend(t, g.c, "POST", g.base+"/login", xff("203.0.113.50")...)
		polls++
		if first.status != http.StatusServiceUnavailable || time.Since(back) > 5*time.Second {
			break
		}
		<-tick.C
	}
	recovery := time.Since(back)
	if first.status != http.StatusOK {
		t.Fatalf("%s after the restart: got %d %s, want 200 (a fresh sliding window)", recovery, first.status, first.body)
	}
	// The request that closed the breaker logged it before it was answered.
	m := g.waitLog(t, restartedAt, regexp.MustCompile(`redis is back, circuit breaker closed.* down_for=(\S+)`))
	t.Logf("redis restarted: enforcement back %s after it answered PING (%d polls); gateway says down_for=%s",
		recovery.Round(time.Millisecond), polls, m[1])
	if recovery > 2*time.Second {
		t.Fatalf("enforcement came back after %s, want within 2s", recovery)
	}
	// Through Redis again: the window holds 10, the recovering request included.
	for i := 1; i < 11; i++ {
		r := mustSend(t, g.c, "POST", g.base+"/login", xff("203.0.113.50")...)
		want := http.StatusOK
		if i >= 10 {
			want = http.StatusTooManyRequests
		}
		if r.status != want {
			t.Fatalf("after the restart, request %d: got %d %s, want %d", i+1, r.status, r.body, want)
		}
	}
}

// sharedConfig is one route to builtin:echo limited by one GCRA policy keyed
// on X-Tenant. on_redis_error: deny, so that nothing is admitted that Redis
// did not count; the generous timeout keeps a loaded machine from turning
// the test into one about latency.
const sharedConfig = `
redis:
  addrs: [127.0.0.1:6379]
  timeout: 500ms
routes:
  - name: all
    match: {path_prefix: /}
    upstream: builtin:echo
    policies: [tenant]
policies:
  tenant:
    key: header:X-Tenant
    algorithm: gcra
    rate: %d
    per: 1s
    burst: %d
    on_redis_error: deny
`

// loadStats is what one worker saw.
type loadStats struct {
	sent, admitted, limited int
	other                   map[int]int
	err                     error
	firstSend, maxSend      time.Time // earliest and latest request start
	minRecv, lastRecv       time.Time // earliest and latest answer read
}

func (s *loadStats) merge(o loadStats) {
	s.sent += o.sent
	s.admitted += o.admitted
	s.limited += o.limited
	for code, n := range o.other {
		s.other[code] += n
	}
	if s.err == nil {
		s.err = o.err
	}
	if o.sent == 0 {
		return
	}
	if s.firstSend.IsZero() || o.firstSend.Before(s.firstSend) {
		s.firstSend = o.firstSend
	}
	if o.maxSend.After(s.maxSend) {
		s.maxSend = o.maxSend
	}
	if s.minRecv.IsZero() || o.minRecv.Before(s.minRecv) {
		s.minRecv = o.minRecv
	}
	if o.lastRecv.After(s.lastRecv) {
		s.lastRecv = o.lastRecv
	}
}

// hammer sends requests to url until stop or until it sent max.
func hammer(c *http.Client, url, tenant string, stop time.Time, maxReqs int) loadStats {
	st := loadStats{other: map[int]int{}}
	for st.sent < maxReqs {
		sentAt := time.Now()
		if !sentAt.Before(stop) {
			break
		}
		r, err := send(c, "GET", url, "X-Tenant", tenant)
		if err != nil {
			st.err = err
			break
		}
		recvAt := time.Now()
		if st.sent == 0 {
			st.firstSend, st.minRecv = sentAt, recvAt
		}
		st.sent++
		st.maxSend, st.lastRecv = sentAt, recvAt // one worker's times only grow
		switch r.status {
		case http.StatusOK:
			st.admitted++
		case http.StatusTooManyRequests:
			st.limited++
		default:
			st.other[r.status]++
		}
	}
	return st
}

// TestThreeGatewaysShareOneRedis runs three gateways on one Redis and
// hammers them with one tenant: together they admit what one limit allows.
func TestThreeGatewaysShareOneRedis(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })

	const (
		// burst/rate is 200ms: a stall of the whole machine shorter than
		// that (GC, -race, a busy shared host) loses no token. 1% of the
		// bound (~170) is 1.7 requests, more than the one token GCRA's
		// discrete emission can leave unclaimed at the end of the run. The
		// rate is low enough that a 2-core machine busy with another test
		// process still sends several times the bound.
		rate, burst    = 100, 20
		workersPerGW   = 4
		loadFor        = 1500 * time.Millisecond
		maxPerWorker   = 5000
		minOutnumber   = 3    // requests must exceed the bound this many times
		lowerFraction  = 0.99 // of the bound, the figure
		boundarySlack  = 1    // Redis TIME and our clock may disagree by a fraction of a token
		tenant         = "tenant-shared"
		warmupTenant   = "tenant-warmup"
		gatewayCount   = 3
		totalWorkerCap = gatewayCount * workersPerGW * maxPerWorker
	)
	s := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, sharedConfig, rate, burst), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATEWAY_REDIS_ADDRS", s.Addr())
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	gws := make([]*gateway, gatewayCount)
	for i := range gws {
		gws[i] = startGateway(t, fmt.Sprintf("gateway-%d", i+1), path)
	}
	c := newTestClient(t)
	// Warm each gateway's connections (client, Redis pool, echo upstream) on
	// another key, so the measured run starts in the steady state.
	for _, g := range gws {
		if r := mustSend(t, c, "GET", g.base+"/", "X-Tenant", warmupTenant); r.status != http.StatusOK {
			t.Fatalf("%s warm-up: got %d %s, want 200", g.name, r.status, r.body)
		}
	}

	stop := time.Now().Add(loadFor)
	per := make([]loadStats, gatewayCount)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for gi, g := range gws {
		per[gi].other = map[int]int{}
		for range workersPerGW {
			wg.Go(func() {
				st := hammer(c, g.base+"/", tenant, stop, maxPerWorker)
				mu.Lock()
				defer mu.Unlock()
				per[gi].merge(st)
			})
		}
	}
	wg.Wait()

	total := loadStats{other: map[int]int{}}
	for gi, st := range per {
		total.merge(st)
		t.Logf("%s: %d requests, %d admitted, %d limited, other %v", gws[gi].name, st.sent, st.admitted, st.limited, st.other)
	}
	if total.err != nil {
		t.Fatalf("a request failed: %v", total.err)
	}
	// Every decision happened between the first request's start and the
	// last answer: the upper bound uses that outer window. Decisions also
	// span at least from the earliest answer to the latest request start,
	// and under steady pressure GCRA admits burst + rate × that span (a gap
	// shorter than burst/rate loses no token): the lower bound uses this
	// inner window, so client-side latency cannot make the test unfair.
	outer := total.lastRecv.Sub(total.firstSend)
	inner := total.maxSend.Sub(total.minRecv)
	upper := burst + rate*outer.Seconds() + boundarySlack
	lower := math.Floor(lowerFraction * (burst + rate*inner.Seconds()))
	// For the record only: 99% of the outer window's bound grows with the
	// last answer's latency, which says nothing about the limiter.
	outerLower := math.Floor(lowerFraction * (burst + rate*outer.Seconds()))
	t.Logf("3 gateways, one redis, gcra %d/s burst %d: admitted %d of %d requests (%d limited); "+
		"bound over first send..last answer (%s): %.1f incl. %d slack; 99%% of bound over first answer..last send (%s): %.0f (over the outer window: %.0f)",
		rate, burst, total.admitted, total.sent, total.limited, outer.Round(time.Millisecond), upper, boundarySlack,
		inner.Round(time.Millisecond), lower, outerLower)
	if len(total.other) > 0 {
		t.Fatalf("got answers other than 200 and 429: %v", total.other)
	}
	if float64(total.sent) < minOutnumber*upper {
		t.Fatalf("sent %d requests for a bound of %.0f: want at least %dx, or the limit was not saturated (machine too slow: lower the rate)",
			total.sent, upper, minOutnumber)
	}
	if total.sent >= totalWorkerCap {
		t.Logf("the request cap (%d) ended the run before %s", totalWorkerCap, loadFor)
	}
	if got := float64(total.admitted); got > upper {
		t.Fatalf("admitted %d, want at most %.1f (burst %d + %d/s × %s + %d)", total.admitted, upper, burst, rate, outer, boundarySlack)
	}
	if got := float64(total.admitted); got < lower {
		t.Fatalf("admitted %d, want at least %.0f (99%% of burst %d + %d/s × %s)", total.admitted, lower, burst, rate, inner)
	}
	for gi, st := range per {
		if st.admitted == 0 {
			t.Errorf("%s admitted nothing: want each gateway to get a share of the one limit", gws[gi].name)
		}
	}
}
