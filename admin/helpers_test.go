package admin

import (
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// TestMain fails the package when a test leaves goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "admin-token-Zq8-4f1c9a7e2b6d0c3f58a1"

// baseYAML is a small local-only configuration.
const baseYAML = `
routes:
  - {name: api, match: {path_prefix: /v1/}, upstream: builtin:echo, policies: [per-ip, tenant-rpm, tenant-inflight]}
tenants:
  keys:
    sk-test-free: {tenant: acme, plan: free}
    sk-test-pro: {tenant: globex, plan: pro}
policies:
  per-ip: {key: ip, rate: 5, per: 1m}
  tenant-rpm: {key: tenant, per: 1m, plans: {free: 5, pro: 50}}
  tenant-inflight: {key: tenant, algorithm: concurrency, limit: 5}
  by-key: {key: api_key, rate: 5, per: 1m}
`

// parse compiles yaml as gateway.yaml, failing the test on an error.
func parse(t *testing.T, yaml string) *policies.Snapshot {
	t.Helper()
	snap, err := policies.Parse("gateway.yaml", []byte(yaml), policies.Options{})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return snap
}

// localEngine is an engine on local buckets only, on the wall clock.
func localEngine(t *testing.T) *limiter.Engine {
	t.Helper()
	e, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// serve starts the admin handler for cfg on a loopback httptest server.
func serve(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// answer is one response, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// call sends method to srv's path with token (none when "") and reads the
// answer.
func call(t *testing.T, srv *httptest.Server, method, path, token string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, srv, req)
}

func send(t *testing.T, srv *httptest.Server, req *http.Request) answer {
	t.Helper()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: body}
}

// decode reads a's JSON body into v, checking that it is JSON.
func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt != "application/json" {
		t.Fatalf("Content-Type: got %q, want application/json (body %s)", a.header.Get("Content-Type"), a.body)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
}

// errorOf decodes an error answer and checks its code against its status.
func (a answer) errorOf(t *testing.T) errorBody {
	t.Helper()
	var e errorBody
	a.decode(t, &e)
	if e.Code != a.status*100 || e.Message == "" {
		t.Fatalf("error body %s: want code %d and a message", a.body, a.status*100)
	}
	return e
}
