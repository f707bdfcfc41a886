package admin

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/policies"
)

// metricsStub stands for the metrics exposition.
var metricsStub = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write([]byte("gateway_requests_total 1\n"))
})

// fullConfig serves every endpoint, with token.
func fullConfig(t *testing.T, token string) Config {
	t.Helper()
	return Config{
		Token:     token,
		Metrics:   metricsStub,
		Snapshots: policies.NewCurrent(parse(t, baseYAML)),
		Keys:      EngineKeys{Engine: localEngine(t)},
		Reload:    func() error { return nil },
		Top:       emptyTop{},
	}
}

// With a token configured, everything but the probes needs it: missing,
// wrong or in the wrong form is 401 with WWW-Authenticate: Bearer. Each
// case starts a minute after the last, so that the count of wrong tokens
// (TestGuessingSlowed) never reaches its limit here.
func TestTokenRequired(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	cfg := fullConfig(t, testToken)
	cfg.Clock = clock.Now
	srv := serve(t, cfg)
	endpoints := []struct {
		method, path string
		open         bool
	}{
		{"GET", "/healthz", true},
		{"GET", "/readyz", true},
		{"GET", "/metrics", false},
		{"GET", "/admin/config", false},
		{"GET", "/admin/keys?policy=per-ip&key=203.0.113.7/32", false},
		{"DELETE", "/admin/keys?policy=per-ip&key=203.0.113.7/32", false},
		{"POST", "/admin/reload", false},
		{"GET", "/admin/top", false},
		{"GET", "/admin/status", false},
		{"GET", "/status", true}, // the page holds no data
	}
	authorizations := []struct {
		name   string
		header []string // Authorization values
		ok     bool
	}{
		{"none", nil, false},
		{"wrong token", []string{"Bearer not-the-token"}, false},
		{"token with a suffix", []string{"Bearer " + testToken + "x"}, false},
		{"token prefix", []string{"Bearer " + testToken[:len(testToken)-1]}, false},
		{"empty bearer", []string{"Bearer "}, false},
		{"basic scheme", []string{"Basic " + testToken}, false},
		{"token without scheme", []string{testToken}, false},
		{"two headers", []string{"Bearer " + testToken, "Bearer " + testToken}, false},
		{"right token", []string{"Bearer " + testToken}, true},
		{"scheme in lower case", []string{"bearer " + testToken}, true},
	}
	for _, ep := range endpoints {
		for _, au := range authorizations {
			t.Run(ep.method+" "+ep.path+"/"+au.name, func(t *testing.T) {
				clock.Advance(failureWindow)
				req, _ := http.NewRequestWithContext(t.Context(), ep.method, srv.URL+ep.path, nil)
				for _, v := range au.header {
					req.Header.Add("Authorization", v)
				}
				a := send(t, srv, req)
				if ep.open || au.ok {
					if a.status != http.StatusOK {
						t.Fatalf("got %d %s, want 200", a.status, a.body)
					}
					return
				}
				if a.status != http.StatusUnauthorized {
					t.Fatalf("got %d %s, want 401", a.status, a.body)
				}
				if got := a.header.Get("WWW-Authenticate"); got != "Bearer" {
					t.Fatalf("WWW-Authenticate: got %q, want Bearer", got)
				}
				a.errorOf(t)
			})
		}
	}
}

// Without a token, the admin API is off (403 naming the setting), the
// probes and /metrics are open.
func TestNoTokenConfigured(t *testing.T) {
	srv := serve(t, fullConfig(t, ""))
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/healthz", http.StatusOK},
		{"GET", "/readyz", http.StatusOK},
		{"GET", "/metrics", http.StatusOK},
		{"GET", "/admin/config", http.StatusForbidden},
		{"GET", "/admin/keys?policy=per-ip&key=203.0.113.7/32", http.StatusForbidden},
		{"DELETE", "/admin/keys?policy=per-ip&key=203.0.113.7/32", http.StatusForbidden},
		{"POST", "/admin/reload", http.StatusForbidden},
		{"GET", "/admin/top", http.StatusForbidden},
		{"GET", "/admin/status", http.StatusForbidden},
		{"POST", "/admin/login", http.StatusForbidden},
		{"GET", "/status", http.StatusOK},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			for _, token := range []string{"", "anything"} {
				a := call(t, srv, c.method, c.path, token)
				if a.status != c.want {
					t.Fatalf("token %q: got %d %s, want %d", token, a.status, a.body, c.want)
				}
				if c.want == http.StatusForbidden {
					if e := a.errorOf(t); e.Message != noTokenMessage {
						t.Fatalf("message: got %q, want %q", e.Message, noTokenMessage)
					}
				}
			}
		})
	}
	if a := call(t, srv, "GET", "/metrics", ""); string(a.body) != "gateway_requests_total 1\n" {
		t.Fatalf("/metrics: got %q, want the exposition", a.body)
	}
}

// /healthz answers ok whatever Ready says; /readyz follows Ready, with its
// reason.
func TestProbes(t *testing.T) {
	var notReady atomic.Pointer[error]
	cfg := fullConfig(t, testToken)
	cfg.Ready = func() error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}
	srv := serve(t, cfg)
	reason := errors.New("redis did not answer at start")
	for _, step := range []struct {
		name       string
		err        error
		wantStatus int
		want       readyBody
	}{
		{"ready", nil, http.StatusOK, readyBody{Status: "ready"}},
		{"not ready", reason, http.StatusServiceUnavailable, readyBody{Status: "not ready", Reason: reason.Error()}},
		{"ready again", nil, http.StatusOK, readyBody{Status: "ready"}},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.err != nil {
				notReady.Store(&step.err)
			} else {
				notReady.Store(nil)
			}
			a := call(t, srv, "GET", "/readyz", "")
			var got readyBody
			a.decode(t, &got)
			if a.status != step.wantStatus || got != step.want {
				t.Fatalf("/readyz: got %d %+v, want %d %+v", a.status, got, step.wantStatus, step.want)
			}
			h := call(t, srv, "GET", "/healthz", "")
			var health map[string]string
			h.decode(t, &health)
			if h.status != http.StatusOK || health["status"] != "ok" {
				t.Fatalf("/healthz: got %d %s, want 200 ok", h.status, h.body)
			}
		})
	}
	if a := call(t, srv, "HEAD", "/readyz", ""); a.status != http.StatusOK {
		t.Fatalf("HEAD /readyz: got %d, want 200", a.status)
	}
}

// Unknown paths are 404 and wrong methods 405 with Allow, in JSON; a
// missing metrics handler is a 404 too.
func TestNotFoundAndMethods(t *testing.T) {
	cfg := fullConfig(t, testToken)
	cfg.Metrics = nil
	srv := serve(t, cfg)
	for _, c := range []struct {
		method, path string
		want         int
		allow        string
	}{
		{"GET", "/", http.StatusNotFound, ""},
		{"GET", "/admin", http.StatusNotFound, ""},
		{"GET", "/admin/config/", http.StatusNotFound, ""},
		{"GET", "/admin/nothing", http.StatusNotFound, ""},
		{"GET", "/metrics", http.StatusNotFound, ""},
		{"POST", "/admin/config", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"PUT", "/admin/keys", http.StatusMethodNotAllowed, "GET, DELETE, HEAD"},
		{"GET", "/admin/reload", http.StatusMethodNotAllowed, "POST"},
		{"POST", "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			a := call(t, srv, c.method, c.path, testToken)
			if a.status != c.want {
				t.Fatalf("got %d %s, want %d", a.status, a.body, c.want)
			}
			if got := a.header.Get("Allow"); got != c.allow {
				t.Fatalf("Allow: got %q, want %q", got, c.allow)
			}
			a.errorOf(t)
		})
	}
}

// /debug/pprof/ is served, with the token, only when Pprof is on.
func TestPprof(t *testing.T) {
	off := serve(t, fullConfig(t, testToken))
	if a := call(t, off, "GET", "/debug/pprof/", testToken); a.status != http.StatusNotFound {
		t.Fatalf("pprof off: got %d, want 404", a.status)
	}
	cfg := fullConfig(t, testToken)
	cfg.Pprof = true
	on := serve(t, cfg)
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/debug/pprof/", testToken, http.StatusOK},
		{"/debug/pprof/cmdline", testToken, http.StatusOK},
		{"/debug/pprof/goroutine?debug=1", testToken, http.StatusOK},
		{"/debug/pprof/", "", http.StatusUnauthorized},
		{"/debug/pprof/heap", "wrong", http.StatusUnauthorized},
	} {
		a := call(t, on, "GET", c.path, c.token)
		if a.status != c.want {
			t.Fatalf("pprof on, %s with token %q: got %d, want %d", c.path, c.token, a.status, c.want)
		}
	}
	if a := call(t, on, "GET", "/debug/pprof/", testToken); !strings.Contains(string(a.body), "goroutine") {
		t.Fatalf("the pprof index does not list profiles: %.200s", a.body)
	}
}

// POST /admin/reload answers the new digest, or 422 with the load's error
// naming file and place.
func TestReload(t *testing.T) {
	cur := policies.NewCurrent(parse(t, baseYAML))
	next := strings.Replace(baseYAML, "rate: 5, per: 1m}", "rate: 7, per: 1m}", 1)
	bad := strings.Replace(baseYAML, "rate: 5, per: 1m}", "rate: -1, per: 1m}", 1)
	nextSnap := parse(t, next)
	var reloadErr atomic.Pointer[error]
	cfg := fullConfig(t, testToken)
	cfg.Snapshots = cur
	cfg.Reload = func() error {
		if p := reloadErr.Load(); p != nil {
			return *p
		}
		cur.Store(nextSnap)
		return nil
	}
	srv := serve(t, cfg)

	a := call(t, srv, "POST", "/admin/reload", testToken)
	var ok reloadBody
	a.decode(t, &ok)
	if want := digestHex(cur.Load().Digest); a.status != http.StatusOK || !ok.Reloaded || ok.Digest != want || want == "" || ok.Source != "gateway.yaml" {
		t.Fatalf("good reload: got %d %+v, want 200, reloaded, digest %s, source gateway.yaml", a.status, ok, want)
	}

	_, err := policies.Parse("gateway.yaml", []byte(bad), policies.Options{})
	if err == nil {
		t.Fatal("the bad config parsed")
	}
	reloadErr.Store(&err)
	before := cur.Load()
	a = call(t, srv, "POST", "/admin/reload", testToken)
	var failed reloadError
	a.decode(t, &failed)
	const place = "gateway.yaml: policies.per-ip.rate"
	if a.status != http.StatusUnprocessableEntity || failed.Code != 42200 || !strings.Contains(failed.Message, place) ||
		len(failed.Problems) != 1 || !strings.HasPrefix(failed.Problems[0], place) {
		t.Fatalf("bad reload: got %d %s, want 422 naming %q", a.status, a.body, place)
	}
	if cur.Load() != before {
		t.Fatal("a failed reload changed the snapshot")
	}

	cfg.Reload = nil
	if a := call(t, serve(t, cfg), "POST", "/admin/reload", testToken); a.status != http.StatusNotImplemented {
		t.Fatalf("without Reload: got %d, want 501", a.status)
	}
}

// New refuses what cannot be served safely.
func TestNewRefuses(t *testing.T) {
	snaps := policies.NewCurrent(parse(t, baseYAML))
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"no snapshots", Config{Token: testToken}},
		{"pprof without a token", Config{Pprof: true, Snapshots: snaps}},
		{"a token with a space", Config{Token: "two words", Snapshots: snaps}},
		{"a token with a newline", Config{Token: "token\n", Snapshots: snaps}},
		{"a token of 31 characters", Config{Token: testToken[:31], Snapshots: snaps}},
		{"a negative session TTL", Config{Token: testToken, SessionTTL: -time.Second, Snapshots: snaps}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New(c.cfg); err == nil {
				t.Fatal("got nil error, want one")
			}
		})
	}
}
