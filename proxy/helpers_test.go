package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
)

// t0 is the fixed instant the test limiter starts at.
var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// newTestClock is an injected limiter clock that tests move by hand.
func newTestClock() *clocktest.Clock { return clocktest.New(t0) }

// newEngine returns the real limiter (local buckets only) on clock.
func newEngine(t *testing.T, clock *clocktest.Clock) *limiter.Engine {
	t.Helper()
	e, err := limiter.NewEngine(clock.Now, limiter.NewLocal(0), nil)
	if err != nil {
		t.Fatalf("building engine: %v", err)
	}
	return e
}

// perMinute is rate events per minute with a burst.
func perMinute(rate, burst int64) limiter.Limit {
	return limiter.Limit{Rate: rate, Period: time.Minute, Burst: burst}
}

// testPolicy compiles a policy by hand, as the policies compiler would. key
// is "ip", "tenant", "api_key" or "header:NAME".
func testPolicy(t testing.TB, name, key string, lim limiter.Limit, onMissing policies.MissingKey) *policies.Policy {
	t.Helper()
	var kf policies.KeyFunc
	var reads policies.KeyReads
	switch {
	case key == "ip":
		reads.IP = true
		kf = func(_ *http.Request, s *policies.Subject) (string, bool) {
			if !s.ClientNet.IsValid() {
				return "", false
			}
			return s.ClientNet.String(), true
		}
	case key == "tenant":
		reads.Tenant = true
		kf = func(_ *http.Request, s *policies.Subject) (string, bool) {
			if s.Tenant == nil {
				return "", false
			}
			return s.Tenant.Name, true
		}
	case key == "api_key":
		reads.APIKey = true
		kf = func(_ *http.Request, s *policies.Subject) (string, bool) {
			return s.APIKey, s.APIKey != ""
		}
	case strings.HasPrefix(key, "header:"):
		name := strings.TrimPrefix(key, "header:")
		reads.Headers = []string{http.CanonicalHeaderKey(name)}
		kf = func(r *http.Request, _ *policies.Subject) (string, bool) {
			v := r.Header.Get(name)
			return v, v != ""
		}
	default:
		t.Fatalf("testPolicy: unknown key %q", key)
	}
	return &policies.Policy{
		Rule:         &limiter.Rule{Name: name, Algorithm: limiter.TokenBucket},
		KeySpec:      key,
		Key:          kf,
		Reads:        reads,
		OnMissingKey: onMissing,
		Limit:        lim,
	}
}

// testRoute builds a route taking every path under prefix.
func testRoute(t testing.TB, name, prefix, upstream string, ps ...*policies.Policy) *policies.Route {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("parsing upstream %q: %v", upstream, err)
	}
	return &policies.Route{
		Name:     name,
		Match:    policies.Match{PathPrefix: prefix},
		Upstream: u,
		Timeout:  10 * time.Second,
		Policies: ps,
	}
}

// testSnapshot assembles a snapshot from routes; trusted are CIDRs.
func testSnapshot(t testing.TB, trusted []string, routes ...*policies.Route) *policies.Snapshot {
	t.Helper()
	snap := &policies.Snapshot{
		Routes:   routes,
		Policies: map[string]*policies.Policy{},
		Tenants:  policies.Tenants{Header: "X-API-Key", Keys: map[string]policies.Tenant{}},
	}
	for _, c := range trusted {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			t.Fatalf("parsing trusted %q: %v", c, err)
		}
		snap.Identity.TrustedProxies = append(snap.Identity.TrustedProxies, p)
	}
	for _, rt := range routes {
		for _, p := range rt.Policies {
			snap.Policies[p.Name()] = p
		}
	}
	return snap
}

// snapshotHolder satisfies Snapshots.
type snapshotHolder struct {
	p atomic.Pointer[policies.Snapshot]
}

func (s *snapshotHolder) Load() *policies.Snapshot { return s.p.Load() }

// gatewayOpts tweak newGateway.
type gatewayOpts struct {
	maxHeaderBytes int
	afterFunc      func(time.Duration, func()) timer
	log            *logRecorder
	idem           idempotency.Store // nil: the Handler's in-process one
	transport      closingTransport  // nil: newTestTransport()
	tracing        trace.TracerProvider
	tokens         *jwtauth.Verifier
	metrics        Observer
	pools          *pool.Pools // nil: the Handler's own, on the real clock
	// h2c: the net/http server behind the lean one serves HTTP/2 by prior
	// knowledge too, as with server.protocols: [http1, h2c].
	h2c bool
}

// closingTransport is a transport whose idle connections a test closes.
type closingTransport interface {
	http.RoundTripper
	CloseIdleConnections()
}

// newTestTransport is net/http's upstream transport as gateway serve
// builds it (NewStandardTransport's). Tests here see net/http's types only:
// the gateway's lean server and transport (proxy/h1), which gateway serve
// puts in front and behind by default, are tested with the handler in
// proxy/h1 and cmd/gateway.
func newTestTransport() *http.Transport { return newStandardTransport(NewDialer().DialContext) }

// timerTransport is net/http's transport without compression: an exchange
// on it is timed by the route deadline's timer, which tests fire by hand.
func timerTransport() *http.Transport { return &http.Transport{DisableCompression: true} }

// newGateway serves a Handler over snap and lim on a loopback httptest server.
func newGateway(t testing.TB, snap *policies.Snapshot, lim Limiter, o gatewayOpts) (*httptest.Server, *Handler) {
	t.Helper()
	holder := &snapshotHolder{}
	holder.p.Store(snap)
	tr := o.transport
	if tr == nil {
		tr = newTestTransport()
	}
	t.Cleanup(tr.CloseIdleConnections)
	logger := slog.New(slog.DiscardHandler)
	if o.log != nil {
		logger = slog.New(o.log)
	}
	h, err := New(Config{Snapshots: holder, Limiter: lim, Transport: tr, Logger: logger, MaxHeaderBytes: o.maxHeaderBytes, Idempotency: o.idem, Tracing: o.tracing, Tokens: o.tokens, Metrics: o.metrics, Pools: o.pools})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if o.afterFunc != nil {
		h.afterFunc = o.afterFunc
	}
	srv := httptest.NewUnstartedServer(h)
	t.Cleanup(srv.Close)
	if o.h2c {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	srv.Start()
	return srv, h
}

// newUpstream serves h on loopback and closes it when the test ends.
func newUpstream(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// closedURL returns an http URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// response is a finished exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with headers and returns the whole response.
func do(t *testing.T, client *http.Client, method, target string, body io.Reader, header http.Header) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body of %s %s: %v", method, target, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// errorJSON is the gateway's error body, decoded strictly.
type errorJSON struct {
	Code         int    `json:"code"`
	Message      string `json:"message"`
	Policy       string `json:"policy"`
	RetryAfterMs *int64 `json:"retry_after_ms"`
}

func decodeError(t *testing.T, r response) errorJSON {
	t.Helper()
	if got, want := r.header.Get("Content-Type"), "application/json; charset=utf-8"; got != want {
		t.Errorf("Content-Type: got %q, want %q", got, want)
	}
	if got, want := r.header.Get("X-Content-Type-Options"), "nosniff"; got != want {
		t.Errorf("X-Content-Type-Options: got %q, want %q", got, want)
	}
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	var e errorJSON
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("decoding error body %q: %v", r.body, err)
	}
	if e.Message == "" {
		t.Errorf("error body %s: empty message", r.body)
	}
	return e
}

// blockingUpstream answers nothing until release is closed (by the test or
// its cleanup) or the request is cancelled; it never sleeps.
func blockingUpstream(t *testing.T) (srv *httptest.Server, arrived <-chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	got := make(chan struct{}, 16)
	srv = newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) }) // runs before srv.Close (cleanups are LIFO)
	return srv, got
}

// fakeLimiter returns a fixed verdict or error: it tests how the proxy renders
// verdicts the local engine cannot produce (a Redis outage, a cost above the
// burst).
type fakeLimiter struct {
	verdict limiter.Verdict
	err     error
}

func (f fakeLimiter) Decide(context.Context, []limiter.Check) (limiter.Verdict, error) {
	return f.verdict, f.err
}

// Reserve is Decide holding nothing.
func (f fakeLimiter) Reserve(context.Context, []limiter.Check) (limiter.Verdict, *limiter.Reservation, error) {
	return f.verdict, nil, f.err
}

// Peek reads nothing.
func (fakeLimiter) Peek(context.Context, []limiter.Check) []limiter.Decision { return nil }

// logRecorder is a slog.Handler that hands every record's message and status
// to a channel, so a test can wait for a log line instead of sleeping.
type logRecorder struct {
	mu      sync.Mutex
	records chan logRecord
}

type logRecord struct {
	level  slog.Level
	msg    string
	status int64
	attrs  map[string]string // string attributes
}

func newLogRecorder() *logRecorder { return &logRecorder{records: make(chan logRecord, 64)} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "status" {
			rec.status = a.Value.Int64()
		}
		if a.Value.Kind() == slog.KindString {
			rec.attrs[a.Key] = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.records <- rec:
	default: // a test that does not read records must not block the handler
	}
	return nil
}

// wait returns the first record with status, or fails after a deadline.
func (l *logRecorder) wait(t *testing.T, status int64) logRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case rec := <-l.records:
			if rec.status == status {
				return rec
			}
		case <-deadline:
			t.Fatalf("no log record with status %d within 10s", status)
		}
	}
}

// manualTimer replaces time.AfterFunc: it fires when the test says so, or
// when its owner's fake clock passes its deadline.
type manualTimer struct {
	owner   *manualTimers
	mu      sync.Mutex
	f       func()
	at      time.Duration // the fake instant it is due
	stopped bool
	fired   bool
}

func (m *manualTimer) Stop() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	wasActive := !m.stopped && !m.fired
	m.stopped = true
	return wasActive
}

// Reset makes the timer due d after the fake now, as time.Timer.Reset.
func (m *manualTimer) Reset(d time.Duration) bool {
	now := m.owner.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	wasActive := !m.stopped && !m.fired
	m.stopped, m.fired = false, false
	m.at = now + d
	return wasActive
}

// fire runs the timer's function as time.AfterFunc would at expiry, unless it
// was stopped; it reports whether it ran.
func (m *manualTimer) fire() bool {
	m.mu.Lock()
	if m.stopped || m.fired {
		m.mu.Unlock()
		return false
	}
	m.fired = true
	f := m.f
	m.mu.Unlock()
	f()
	return true
}

// due reports whether the timer is armed and due at now.
func (m *manualTimer) due(now time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.stopped && !m.fired && m.at <= now
}

// manualTimers hands out manualTimers, remembers them, and keeps a fake
// clock that advance moves.
type manualTimers struct {
	mu     sync.Mutex
	clock  time.Duration
	timers []*manualTimer
}

func (m *manualTimers) afterFunc(d time.Duration, f func()) timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	tm := &manualTimer{owner: m, f: f, at: m.clock + d}
	m.timers = append(m.timers, tm)
	return tm
}

func (m *manualTimers) now() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clock
}

// advance moves the fake clock by d and fires every timer then due; it
// returns how many fired.
func (m *manualTimers) advance(d time.Duration) int {
	m.mu.Lock()
	m.clock += d
	now := m.clock
	timers := append([]*manualTimer(nil), m.timers...)
	m.mu.Unlock()
	n := 0
	for _, tm := range timers {
		if tm.due(now) && tm.fire() {
			n++
		}
	}
	return n
}

func (m *manualTimers) last(t *testing.T) *manualTimer {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.timers) == 0 {
		t.Fatal("no route timer was armed")
	}
	return m.timers[len(m.timers)-1]
}

// setCallerKey puts the tenant's key where a client of the API at path
// sends it: x-api-key with a version on Anthropic's Messages, a bearer
// token elsewhere.
func setCallerKey(req *http.Request, path, key string) {
	if strings.HasPrefix(path, "/v1/messages") {
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		return
	}
	req.Header.Set("Authorization", "Bearer "+key)
}
