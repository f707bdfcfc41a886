package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

func TestNewRejectsNilDependencies(t *testing.T) {
	good := Config{
		Snapshots: &snapshotHolder{},
		Limiter:   fakeLimiter{},
		Transport: newTestTransport(),
		Logger:    slog.New(slog.DiscardHandler),
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"snapshots", func(c *Config) { c.Snapshots = nil }, "nil Snapshots"},
		{"limiter", func(c *Config) { c.Limiter = nil }, "nil Limiter"},
		{"transport", func(c *Config) { c.Transport = nil }, "nil Transport"},
		{"logger", func(c *Config) { c.Logger = nil }, "nil Logger"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mutate(&cfg)
			h, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: got (%v, %v), want error containing %q", h, err, tt.want)
			}
		})
	}
	if _, err := New(good); err != nil {
		t.Fatalf("New with every dependency: got %v, want nil", err)
	}
}

// TestRateLimitSequence is the exact 200 → 429 sequence of a per-IP token
// bucket (5 per minute, burst 5) at a fixed instant, then one refill.
func TestRateLimitSequence(t *testing.T) {
	var hits atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		// An upstream with its own idea of the limits: the gateway's win.
		w.Header().Set("RateLimit", `"upstream";r=999;t=1`)
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("X-RateLimit-Remaining", "999")
		io.WriteString(w, "ok")
	}))
	clock := newTestClock()
	snap := testSnapshot(t, nil, testRoute(t, "default", "/", up.URL,
		testPolicy(t, "per-ip", "ip", perMinute(5, 5), policies.MissingReject)))
	gw, _ := newGateway(t, snap, newEngine(t, clock), gatewayOpts{})

	type want struct {
		status             int
		rateLimit          string
		xRemaining, xReset string
		retryAfter         string
	}
	steps := []want{
		{200, `"per-ip";r=4;t=12`, "4", "12", ""},
		{200, `"per-ip";r=3;t=24`, "3", "24", ""},
		{200, `"per-ip";r=2;t=36`, "2", "36", ""},
		{200, `"per-ip";r=1;t=48`, "1", "48", ""},
		{200, `"per-ip";r=0;t=60`, "0", "60", ""},
		{429, `"per-ip";r=0;t=12`, "0", "12", "12"},
		{429, `"per-ip";r=0;t=12`, "0", "12", "12"},
	}
	for i, w := range steps {
		r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil)
		if r.status != w.status {
			t.Fatalf("request %d: status got %d, want %d (body %s)", i+1, r.status, w.status, r.body)
		}
		checkHeader(t, i+1, r.header, "RateLimit-Policy", `"per-ip";q=5;w=60`)
		checkHeader(t, i+1, r.header, "RateLimit", w.rateLimit)
		checkHeader(t, i+1, r.header, "X-RateLimit-Limit", "5")
		checkHeader(t, i+1, r.header, "X-RateLimit-Remaining", w.xRemaining)
		checkHeader(t, i+1, r.header, "X-RateLimit-Reset", w.xReset)
		if w.retryAfter == "" {
			if got := r.header.Values("Retry-After"); len(got) != 0 {
				t.Errorf("request %d: Retry-After got %q, want none", i+1, got)
			}
		} else {
			checkHeader(t, i+1, r.header, "Retry-After", w.retryAfter)
		}
		if w.status == 200 {
			if string(r.body) != "ok" {
				t.Errorf("request %d: body got %q, want %q", i+1, r.body, "ok")
			}
			continue
		}
		e := decodeError(t, r)
		if e.Code != 42900 || e.Policy != "per-ip" || e.RetryAfterMs == nil || *e.RetryAfterMs != 12000 {
			t.Errorf("request %d: body got %s, want code 42900, policy per-ip, retry_after_ms 12000", i+1, r.body)
		}
		if want := `rate limit exceeded for policy "per-ip" (5 per 1m, burst 5); retry in 12s`; e.Message != want {
			t.Errorf("request %d: message got %q, want %q", i+1, e.Message, want)
		}
	}
	if got := hits.Load(); got != 5 {
		t.Errorf("upstream hits: got %d, want 5 (denied requests must not be forwarded)", got)
	}

	clock.Advance(12 * time.Second) // one token back
	r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil)
	if r.status != 200 {
		t.Fatalf("after refill: status got %d, want 200", r.status)
	}
	checkHeader(t, 8, r.header, "RateLimit", `"per-ip";r=0;t=60`)
}

// checkHeader wants exactly one value of name equal to want.
func checkHeader(t *testing.T, step int, h http.Header, name, want string) {
	t.Helper()
	got := h.Values(name)
	if len(got) != 1 || got[0] != want {
		t.Errorf("request %d: %s got %q, want [%q]", step, name, got, want)
	}
}

// TestErrorAnswers covers every answer the gateway gives itself, over HTTP.
//
// A body without a Content-Length streams: the upstream gets the request's
// start before the gateway sees the body exceed the limit and answers 413,
// and the upstream's handler may run after that answer. So the test waits
// for the hits a row expects instead of reading a counter at the answer
// (which once in a few runs counted that late hit in the next row).
func TestErrorAnswers(t *testing.T) {
	echoHits := make(chan struct{}, 16)
	echo := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echoHits <- struct{}{}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(b)
	}))
	slow, _ := blockingUpstream(t)

	small := testRoute(t, "small", "/small", echo.URL)
	small.MaxBodyBytes = 16
	slowRoute := testRoute(t, "slow", "/slow", slow.URL)
	slowRoute.Timeout = 50 * time.Millisecond
	snap := testSnapshot(t, nil,
		small,
		testRoute(t, "closed", "/closed", closedURL(t)),
		slowRoute,
		testRoute(t, "keyed", "/keyed", echo.URL,
			testPolicy(t, "per-user", "header:X-User", perMinute(100, 100), policies.MissingReject)),
	)
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{maxHeaderBytes: 1024})

	tests := []struct {
		name       string
		method     string
		path       string
		body       func() io.Reader
		header     http.Header
		wantStatus int
		wantPolicy string
		wantInMsg  string
		wantHits   int // upstream hits of the echo for this request
	}{
		{name: "no route", method: "GET", path: "/nope", wantStatus: 404, wantInMsg: "no route"},
		{name: "content-length over limit", method: "POST", path: "/small",
			body:       func() io.Reader { return strings.NewReader(strings.Repeat("x", 100)) },
			wantStatus: 413, wantInMsg: "16 bytes"},
		{name: "chunked body over limit", method: "POST", path: "/small",
			body:       func() io.Reader { return io.MultiReader(strings.NewReader(strings.Repeat("x", 100))) },
			wantStatus: 413, wantInMsg: "16 bytes", wantHits: 1},
		{name: "headers too large", method: "GET", path: "/small",
			header:     http.Header{"X-Big": {strings.Repeat("b", 2000)}},
			wantStatus: 431, wantInMsg: "1024 bytes"},
		{name: "upstream port closed", method: "GET", path: "/closed", wantStatus: 502, wantInMsg: "upstream"},
		{name: "upstream too slow", method: "GET", path: "/slow", wantStatus: 504, wantInMsg: "50ms"},
		{name: "missing key rejected", method: "GET", path: "/keyed", wantStatus: 401,
			wantPolicy: "per-user", wantInMsg: "header:X-User"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			r := do(t, gw.Client(), tt.method, gw.URL+tt.path, body, tt.header)
			if r.status != tt.wantStatus {
				t.Fatalf("status: got %d, want %d (body %s)", r.status, tt.wantStatus, r.body)
			}
			e := decodeError(t, r)
			if e.Code != tt.wantStatus*100 {
				t.Errorf("code: got %d, want %d", e.Code, tt.wantStatus*100)
			}
			if e.Policy != tt.wantPolicy {
				t.Errorf("policy: got %q, want %q", e.Policy, tt.wantPolicy)
			}
			if !strings.Contains(e.Message, tt.wantInMsg) {
				t.Errorf("message: got %q, want it to contain %q", e.Message, tt.wantInMsg)
			}
			for i := range tt.wantHits {
				select {
				case <-echoHits:
				case <-time.After(10 * time.Second):
					t.Fatalf("upstream hits: got %d within 10s, want %d", i, tt.wantHits)
				}
			}
			select {
			case <-echoHits:
				t.Errorf("upstream hits: got more than %d", tt.wantHits)
			default:
			}
		})
	}

	t.Run("key present passes", func(t *testing.T) {
		r := do(t, gw.Client(), "POST", gw.URL+"/keyed", strings.NewReader("hi"), http.Header{"X-User": {"u1"}})
		if r.status != 200 || string(r.body) != "hi" {
			t.Fatalf("got %d %q, want 200 %q", r.status, r.body, "hi")
		}
		<-echoHits
	})
}

func TestNoSnapshot(t *testing.T) {
	gw, _ := newGateway(t, nil, fakeLimiter{}, gatewayOpts{})
	r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil)
	if r.status != 503 {
		t.Fatalf("status: got %d, want 503", r.status)
	}
	if e := decodeError(t, r); e.Code != 50300 {
		t.Errorf("code: got %d, want 50300", e.Code)
	}
}

// TestVerdictRendering feeds verdicts the local engine cannot produce (a
// Redis outage, a failing limiter, a cost above the burst) through a fake
// limiter: what is under test is the proxy's answer, not the limiter.
func TestVerdictRendering(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	lim := perMinute(10, 10)
	tests := []struct {
		name       string
		lim        fakeLimiter
		wantStatus int
		wantPolicy string
		wantInMsg  string
		wantRetry  string
	}{
		{
			name: "fail closed is 503",
			lim: fakeLimiter{verdict: limiter.DeniedBy(0, []limiter.Decision{
				{Policy: "shared", Limit: lim, Reason: limiter.ReasonUnavailable, RetryAfter: 500 * time.Millisecond},
			})},
			wantStatus: 503, wantPolicy: "shared", wantInMsg: "fails closed", wantRetry: "1",
		},
		{
			name:       "limiter error is 500",
			lim:        fakeLimiter{err: errors.New("boom")},
			wantStatus: 500, wantInMsg: "rate limiter failed",
		},
		{
			name:       "denied without decisions is 500",
			lim:        fakeLimiter{verdict: limiter.Verdict{}},
			wantStatus: 500, wantInMsg: "without a decision",
		},
		{
			name: "cost too high",
			lim: fakeLimiter{verdict: limiter.DeniedBy(0, []limiter.Decision{
				{Policy: "shared", Limit: lim, Reason: limiter.ReasonCostTooHigh, RetryAfter: time.Minute},
			})},
			wantStatus: 429, wantPolicy: "shared", wantInMsg: "more than policy \"shared\" allows at once (burst 10)", wantRetry: "60",
		},
		{
			name: "denial cache renders as limited",
			lim: fakeLimiter{verdict: limiter.DeniedBy(0, []limiter.Decision{
				{Policy: "shared", Limit: lim, Reason: limiter.ReasonDenialCached, RetryAfter: 1500 * time.Millisecond},
			})},
			wantStatus: 429, wantPolicy: "shared", wantInMsg: "retry in 2s", wantRetry: "2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := testSnapshot(t, nil, testRoute(t, "r", "/", up.URL,
				testPolicy(t, "shared", "ip", lim, policies.MissingReject)))
			gw, _ := newGateway(t, snap, tt.lim, gatewayOpts{})
			r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil)
			if r.status != tt.wantStatus {
				t.Fatalf("status: got %d, want %d (body %s)", r.status, tt.wantStatus, r.body)
			}
			e := decodeError(t, r)
			if e.Code != tt.wantStatus*100 || e.Policy != tt.wantPolicy {
				t.Errorf("body: got %s, want code %d policy %q", r.body, tt.wantStatus*100, tt.wantPolicy)
			}
			if !strings.Contains(e.Message, tt.wantInMsg) {
				t.Errorf("message: got %q, want it to contain %q", e.Message, tt.wantInMsg)
			}
			if got := r.header.Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After: got %q, want %q", got, tt.wantRetry)
			}
		})
	}
}

// TestDenyAll: rate 0 denies everything and says so.
func TestDenyAll(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	snap := testSnapshot(t, nil, testRoute(t, "r", "/", up.URL,
		testPolicy(t, "closed", "ip", limiter.Limit{Rate: 0, Period: time.Minute}, policies.MissingReject)))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil)
	if r.status != 429 {
		t.Fatalf("status: got %d, want 429", r.status)
	}
	e := decodeError(t, r)
	if want := `policy "closed" denies all requests (rate 0)`; e.Message != want {
		t.Errorf("message: got %q, want %q", e.Message, want)
	}
	if e.RetryAfterMs == nil || *e.RetryAfterMs != 60000 {
		t.Errorf("retry_after_ms: got %v, want 60000", e.RetryAfterMs)
	}
	checkHeader(t, 1, r.header, "Retry-After", "60")
	checkHeader(t, 1, r.header, "RateLimit-Policy", `"closed";q=0;w=60`)
}

// TestMissingKey: skip forwards without the policy; shared puts every keyless
// request in one bucket.
func TestMissingKey(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	snap := testSnapshot(t, nil,
		testRoute(t, "skip", "/skip", up.URL,
			testPolicy(t, "skip-user", "header:X-User", perMinute(1, 1), policies.MissingSkip)),
		testRoute(t, "shared", "/shared", up.URL,
			testPolicy(t, "shared-user", "header:X-User", perMinute(1, 1), policies.MissingShared)),
	)
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	for i := range 3 {
		r := do(t, gw.Client(), "GET", gw.URL+"/skip", nil, nil)
		if r.status != 200 {
			t.Fatalf("skip request %d: status got %d, want 200", i+1, r.status)
		}
		if got := r.header.Values("RateLimit"); len(got) != 0 {
			t.Errorf("skip request %d: RateLimit got %q, want none (policy skipped)", i+1, got)
		}
	}

	tests := []struct {
		name   string
		header http.Header
		want   int
	}{
		{"first keyless", nil, 200},
		{"second keyless shares the bucket", nil, 429},
		{"keyed request has its own bucket", http.Header{"X-User": {"u1"}}, 200},
	}
	for _, tt := range tests {
		r := do(t, gw.Client(), "GET", gw.URL+"/shared", nil, tt.header)
		if r.status != tt.want {
			t.Errorf("%s: status got %d, want %d", tt.name, r.status, tt.want)
		}
	}
}

// TestMultiplePolicies: one header item per policy; X-RateLimit-* from the
// most restrictive one.
func TestMultiplePolicies(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	snap := testSnapshot(t, nil, testRoute(t, "r", "/", up.URL,
		testPolicy(t, "wide", "ip", perMinute(10, 10), policies.MissingReject),
		testPolicy(t, "narrow", "ip", perMinute(3, 3), policies.MissingReject)))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil)
	if r.status != 200 {
		t.Fatalf("status: got %d, want 200", r.status)
	}
	checkHeader(t, 1, r.header, "RateLimit-Policy", `"wide";q=10;w=60, "narrow";q=3;w=60`)
	checkHeader(t, 1, r.header, "RateLimit", `"wide";r=9;t=6, "narrow";r=2;t=20`)
	checkHeader(t, 1, r.header, "X-RateLimit-Limit", "3")
	checkHeader(t, 1, r.header, "X-RateLimit-Remaining", "2")
	checkHeader(t, 1, r.header, "X-RateLimit-Reset", "20")
}

// TestDeniedBySecondPolicyCostsFirstNothing: a request the per-user policy
// denies gives its token back to the per-IP policy.
func TestDeniedBySecondPolicyCostsFirstNothing(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	snap := testSnapshot(t, nil, testRoute(t, "r", "/", up.URL,
		testPolicy(t, "per-ip", "ip", perMinute(2, 2), policies.MissingReject),
		testPolicy(t, "per-user", "header:X-User", perMinute(1, 1), policies.MissingReject)))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	steps := []struct {
		user       string
		wantStatus int
		wantPolicy string // of a 429
		wantXRem   string
	}{
		{"u1", 200, "", "0"},         // per-ip 1 left, per-user 0 left
		{"u1", 429, "per-user", "0"}, // per-user denies; per-ip's token is given back
		{"u1", 429, "per-user", "0"}, // again
		{"u2", 200, "", "0"},         // per-ip still had 1: the denials cost it nothing
		{"u3", 429, "per-ip", "0"},   // now per-ip is empty
	}
	for i, s := range steps {
		r := do(t, gw.Client(), "GET", gw.URL+"/", nil, http.Header{"X-User": {s.user}})
		if r.status != s.wantStatus {
			t.Fatalf("request %d (%s): status got %d, want %d (body %s)", i+1, s.user, r.status, s.wantStatus, r.body)
		}
		if s.wantStatus == 429 {
			if e := decodeError(t, r); e.Policy != s.wantPolicy {
				t.Errorf("request %d: policy got %q, want %q", i+1, e.Policy, s.wantPolicy)
			}
		}
		checkHeader(t, i+1, r.header, "X-RateLimit-Remaining", s.wantXRem)
	}
}

// TestClientGone: a client that disconnects while the upstream works is
// logged at debug with status 499 and nothing is answered.
func TestClientGone(t *testing.T) {
	slow, arrived := blockingUpstream(t)
	rec := newLogRecorder()
	snap := testSnapshot(t, nil, testRoute(t, "slow", "/", slow.URL))
	gw, _ := newGateway(t, snap, fakeLimiter{}, gatewayOpts{log: rec})

	req, err := http.NewRequest("GET", gw.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		resp, err := gw.Client().Do(req.WithContext(ctx))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("request never reached the upstream")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Error("client: got a response, want a cancelled request")
	}
	got := rec.wait(t, statusClientClosed)
	if got.level != slog.LevelDebug {
		t.Errorf("log level: got %v, want %v", got.level, slog.LevelDebug)
	}
}

// TestUnauthorized: a rejected request is told what to send.
func TestUnauthorized(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tests := []struct {
		name, keyHeader, spec string
		header                http.Header
		wantMsg               string
		wantAuthenticate      string
	}{
		{name: "tenant via X-API-Key", keyHeader: "X-API-Key", spec: "tenant",
			wantMsg: `policy "p" needs a known API key in the X-API-Key header`},
		{name: "unknown key is no tenant", keyHeader: "X-API-Key", spec: "tenant", header: http.Header{"X-Api-Key": {"nope"}},
			wantMsg: `policy "p" needs a known API key in the X-API-Key header`},
		{name: "tenant via bearer token", keyHeader: "Authorization", spec: "tenant",
			wantMsg: `policy "p" needs a known API key in the Authorization header`, wantAuthenticate: "Bearer"},
		{name: "api key", keyHeader: "X-API-Key", spec: "api_key",
			wantMsg: `policy "p" needs an API key in the X-API-Key header`},
		{name: "header key", keyHeader: "X-API-Key", spec: "header:X-User",
			wantMsg: `policy "p" needs a key (header:X-User) that this request does not carry`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := testSnapshot(t, nil, testRoute(t, "r", "/", up.URL,
				testPolicy(t, "p", tt.spec, perMinute(10, 10), policies.MissingReject)))
			snap.Tenants.Header = tt.keyHeader
			gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
			r := do(t, gw.Client(), "GET", gw.URL+"/", nil, tt.header)
			if r.status != 401 {
				t.Fatalf("status: got %d, want 401", r.status)
			}
			e := decodeError(t, r)
			if e.Code != 40100 || e.Policy != "p" || e.Message != tt.wantMsg {
				t.Errorf("body: got %s, want code 40100, policy p, message %q", r.body, tt.wantMsg)
			}
			if got := r.header.Get("WWW-Authenticate"); got != tt.wantAuthenticate {
				t.Errorf("WWW-Authenticate: got %q, want %q", got, tt.wantAuthenticate)
			}
		})
	}
}

// TestAnswerLogLevels: an upstream failure is worth a warning per request;
// a fail-closed 503 is not, because during a Redis outage every request gets
// one and the limiter already logs the outage (throttled).
func TestAnswerLogLevels(t *testing.T) {
	lim := perMinute(10, 10)
	closed := newUpstream(t, http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close() // nothing listens there any more: 502
	tests := []struct {
		name   string
		lim    Limiter
		status int
		level  slog.Level
	}{
		{"fail closed 503 at debug", fakeLimiter{verdict: limiter.DeniedBy(0, []limiter.Decision{
			{Policy: "shared", Limit: lim, Reason: limiter.ReasonUnavailable, RetryAfter: time.Second},
		})}, http.StatusServiceUnavailable, slog.LevelDebug},
		{"upstream 502 at warn", fakeLimiter{verdict: limiter.Verdict{Allowed: true, Decisions: []limiter.Decision{
			{Policy: "shared", Allowed: true, Limit: lim, Remaining: 9},
		}}}, http.StatusBadGateway, slog.LevelWarn},
		{"limiter failure 500 at error", fakeLimiter{err: errors.New("boom")}, http.StatusInternalServerError, slog.LevelError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newLogRecorder()
			snap := testSnapshot(t, nil, testRoute(t, "r", "/", closedURL,
				testPolicy(t, "shared", "ip", lim, policies.MissingReject)))
			gw, _ := newGateway(t, snap, tt.lim, gatewayOpts{log: rec})
			if r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil); r.status != tt.status {
				t.Fatalf("status: got %d, want %d", r.status, tt.status)
			}
			if got := rec.wait(t, int64(tt.status)); got.level != tt.level {
				t.Errorf("log level: got %v, want %v", got.level, tt.level)
			}
		})
	}
}

// TestRateLimitHeaderSets: a route's rate_limit_headers decides which
// rate-limit headers its 200s and 429s carry; names left out pass through as
// the upstream sent them, and a 429 always says Retry-After, and its
// Content-Length matches its body.
func TestRateLimitHeaderSets(t *testing.T) {
	const upRateLimit = `"upstream";r=999;t=1`
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("RateLimit", upRateLimit)
		io.WriteString(w, "ok")
	}))
	sets := []string{"all", "ietf", "legacy", "none"}
	yaml := "routes:\n"
	for _, set := range sets {
		yaml += fmt.Sprintf("  - {name: %[1]s, match: {path_prefix: /%[1]s}, upstream: %[2]q, rate_limit_headers: %[1]s, policies: [%[1]s]}\n", set, up.URL)
	}
	yaml += "policies:\n"
	for _, set := range sets {
		yaml += "  " + set + ": {key: ip, rate: 1, per: 1m}\n"
	}
	snap := compileYAML(t, yaml)
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	for _, set := range sets {
		ietf, legacy := set == "all" || set == "ietf", set == "all" || set == "legacy"
		t.Run(set, func(t *testing.T) {
			for i, status := range []int{http.StatusOK, http.StatusTooManyRequests} {
				r := do(t, gw.Client(), "GET", gw.URL+"/"+set, nil, nil)
				if r.status != status {
					t.Fatalf("request %d: status got %d, want %d (body %s)", i+1, r.status, status, r.body)
				}
				// What the upstream sent, where the gateway does not speak:
				// nothing on a 429, which is the gateway's own answer.
				var upstream = func(v string) []string {
					if status == http.StatusOK {
						return []string{v}
					}
					return nil
				}
				want := map[string][]string{
					"RateLimit-Policy": nil, "RateLimit": upstream(upRateLimit),
					"X-RateLimit-Limit": upstream("999"), "X-RateLimit-Remaining": nil, "X-RateLimit-Reset": nil,
				}
				if ietf {
					want["RateLimit-Policy"] = []string{`"` + set + `";q=1;w=60`}
					want["RateLimit"] = []string{`"` + set + `";r=0;t=60`}
				}
				if legacy {
					want["X-RateLimit-Limit"], want["X-RateLimit-Remaining"], want["X-RateLimit-Reset"] = []string{"1"}, []string{"0"}, []string{"60"}
				}
				for name, want := range want {
					if got := r.header.Values(name); !slices.Equal(got, want) {
						t.Errorf("request %d: %s got %q, want %q", i+1, name, got, want)
					}
				}
				if status == http.StatusTooManyRequests {
					checkHeader(t, i+1, r.header, "Retry-After", "60")
					checkHeader(t, i+1, r.header, "Content-Length", strconv.Itoa(len(r.body)))
				}
			}
		})
	}
}
