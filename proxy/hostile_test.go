package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
)

// The hostile-request suite: crafted paths, header tricks and key-guessing
// patterns sent over raw TCP (so nothing is cleaned on the way) to the real
// Handler compiled from YAML. Each row says which route judged the request
// (the policy named in the 429 body or the RateLimit-Policy header) and
// exactly what the upstream received, or the gateway's exact refusal.

// received is one request as an upstream saw it.
type received struct {
	upstream string // which upstream (route family) got it
	uri      string // the request target as received
	header   http.Header
}

// recorder collects what its upstreams receive. It is safe for concurrent use.
type recorder struct {
	mu  sync.Mutex
	got []received
}

// upstream serves one labelled upstream that records and answers 200.
func (rc *recorder) upstream(t *testing.T, label string) *httptest.Server {
	return newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.got = append(rc.got, received{upstream: label, uri: r.RequestURI, header: r.Header.Clone()})
		rc.mu.Unlock()
		io.WriteString(w, "ok")
	}))
}

// take returns and forgets what was received so far. The gateway answers
// only after the upstream handler returned, so a finished exchange is
// already recorded.
func (rc *recorder) take() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	got := rc.got
	rc.got = nil
	return got
}

// compileYAML compiles a configuration the way the gateway does.
func compileYAML(t *testing.T, yaml string) *policies.Snapshot {
	t.Helper()
	snap, err := policies.Parse("hostile.yaml", []byte(yaml), policies.Options{})
	if err != nil {
		t.Fatalf("compiling test config: %v\n%s", err, yaml)
	}
	return snap
}

// rawExchange writes raw (a whole request, CRLF line ends) on a new
// connection to addr and reads one response.
func rawExchange(t *testing.T, addr, method, raw string) response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatalf("writing request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response to %q: %v", firstLine(raw), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func firstLine(raw string) string {
	line, _, _ := strings.Cut(raw, "\r\n")
	return line
}

// buildRaw assembles a request; a Host line is added unless lines has one.
func buildRaw(method, target, host string, lines []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	hasHost := false
	for _, l := range lines {
		if strings.HasPrefix(strings.ToLower(l), "host:") {
			hasHost = true
		}
	}
	if !hasHost {
		fmt.Fprintf(&b, "Host: %s\r\n", host)
	}
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}

var policyItem = regexp.MustCompile(`^"([^"]+)"`)

// judgedBy is the policy that decided a response: the 429/401 body's policy,
// else the first item of RateLimit-Policy; "" when no policy decided.
func judgedBy(t *testing.T, r response) string {
	t.Helper()
	if (r.status == 429 || r.status == 401) && len(r.body) > 0 { // HEAD answers have no body
		return decodeError(t, r).Policy
	}
	if m := policyItem.FindStringSubmatch(r.header.Get("RateLimit-Policy")); m != nil {
		return m[1]
	}
	return ""
}

// hostileConfig has a closed admin route (rate 0), a closed host route, a
// public route stripped onto an upstream base path, a GET-only closed route,
// a keyed route and a catch-all; each decides with its own policy so the
// response names the route that judged it.
const hostileConfig = `
server:
  trusted_proxies: [%s]
tenants:
  header: X-API-Key
  keys:
    sk-known: {tenant: acme, plan: free}
routes:
  - {name: hosted, match: {host: admin.example}, upstream: "%[2]s", policies: [host-closed]}
  - {name: admin, match: {path_prefix: /admin}, upstream: "%[2]s", policies: [admin-closed]}
  - {name: public, match: {path_prefix: /public}, upstream: "%[3]s/static", strip_prefix: /public, policies: [public-ip]}
  - {name: reports, match: {path_prefix: /reports, methods: [GET]}, upstream: "%[4]s", policies: [reports-closed]}
  - {name: keyed, match: {path_prefix: /keyed}, upstream: "%[4]s", policies: [per-user, per-key]}
  - {name: query, match: {path_prefix: /query}, upstream: "%[4]s", policies: [per-q]}
  - {name: default, match: {path_prefix: /}, upstream: "%[4]s", policies: [default-ip]}
policies:
  host-closed: {key: ip, rate: 0}
  admin-closed: {key: ip, rate: 0}
  reports-closed: {key: ip, rate: 0}
  public-ip: {key: ip, rate: 1000, per: 1m}
  per-user: {key: "header:X-User", rate: 1000, per: 1m}
  per-key: {key: api_key, rate: 1000, per: 1m}
  per-q: {key: "query:user", rate: 1000, per: 1m}
  default-ip: {key: ip, rate: 1000, per: 1m}
`

type hostileRow struct {
	name   string
	method string // GET when empty
	target string
	lines  []string // header lines
	// What must happen.
	wantStatus int
	wantCode   int    // the gateway's JSON code (0 when the answer is not the gateway's JSON)
	wantInMsg  string // part of the JSON message
	wantPolicy string // the policy that judged it ("" none)
	wantUp     string // the upstream that received it ("" none)
	wantURI    string // what that upstream received as the request target
	// wantHeaders are header values at the upstream, several joined by "|";
	// "" means absent.
	wantHeaders map[string]string
}

func runHostile(t *testing.T, gw *httptest.Server, rec *recorder, rows []hostileRow) {
	t.Helper()
	addr := strings.TrimPrefix(gw.URL, "http://")
	for _, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = "GET"
			}
			rec.take()
			r := rawExchange(t, addr, method, buildRaw(method, tt.target, addr, tt.lines))
			got := rec.take()
			if r.status != tt.wantStatus {
				t.Fatalf("status: got %d, want %d (body %s; upstream got %+v)", r.status, tt.wantStatus, r.body, got)
			}
			if tt.wantCode != 0 {
				e := decodeError(t, r)
				if e.Code != tt.wantCode || !strings.Contains(e.Message, tt.wantInMsg) {
					t.Errorf("error body: got %s, want code %d and a message containing %q", r.body, tt.wantCode, tt.wantInMsg)
				}
			}
			if p := judgedBy(t, r); p != tt.wantPolicy {
				t.Errorf("judged by: got policy %q, want %q", p, tt.wantPolicy)
			}
			if tt.wantUp == "" {
				if len(got) != 0 {
					t.Errorf("upstream: got %+v, want nothing forwarded", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("upstream: got %d requests (%+v), want 1", len(got), got)
			}
			if got[0].upstream != tt.wantUp || got[0].uri != tt.wantURI {
				t.Errorf("upstream received: got %s %q, want %s %q", got[0].upstream, got[0].uri, tt.wantUp, tt.wantURI)
			}
			for name, want := range tt.wantHeaders {
				if v := strings.Join(got[0].header.Values(name), "|"); v != want {
					t.Errorf("upstream header %s: got %q, want %q", name, v, want)
				}
			}
		})
	}
}

func newHostileGateway(t *testing.T, trusted string) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	admin, public, api := rec.upstream(t, "admin"), rec.upstream(t, "public"), rec.upstream(t, "api")
	snap := compileYAML(t, fmt.Sprintf(hostileConfig, trusted, admin.URL, public.URL, api.URL))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	return gw, rec
}

// TestHostilePaths: every spelling of a path is judged and forwarded in one
// canonical form, or refused with 400.
func TestHostilePaths(t *testing.T) {
	gw, rec := newHostileGateway(t, "")
	const (
		adminDenied = 429
		badPath     = 40000
	)
	rows := []hostileRow{
		{name: "plain admin path", target: "/admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "double slash", target: "//admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "slashes inside", target: "/admin//x///y", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "dot-dot back into admin", target: "/x/../admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "single dots", target: "/./admin/./x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "encoded dot-dot", target: "/v1/%2e%2e/admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "mixed encoded dot-dot", target: "/v1/.%2E/admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "encoded letters", target: "/%61dm%69n/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "public dot-dot into admin", target: "/public/../admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "absolute form", target: "http://other.example/x/../admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},

		{name: "encoded slash dot-dot", target: "/v1%2F..%2Fadmin/x", wantStatus: 400, wantCode: badPath, wantInMsg: "encoded slash (%2F)"},
		{name: "encoded slash lower case", target: "/admin%2fx", wantStatus: 400, wantCode: badPath, wantInMsg: "encoded slash (%2F)"},
		{name: "backslash", target: `/v1\..\admin/x`, wantStatus: 400, wantCode: badPath, wantInMsg: "backslash"},
		{name: "encoded backslash", target: "/v1%5C..%5Cadmin/x", wantStatus: 400, wantCode: badPath, wantInMsg: "backslash"},
		{name: "encoded NUL", target: "/admin%00/x", wantStatus: 400, wantCode: badPath, wantInMsg: "control character"},
		{name: "encoded newline", target: "/x%0d%0aX-Evil:%201", wantStatus: 400, wantCode: badPath, wantInMsg: "control character"},
		{name: "dot-dot above the root", target: "/../admin/x", wantStatus: 400, wantCode: badPath, wantInMsg: "above the root"},
		{name: "encoded dot-dot above the root", target: "/a/%2e%2e/%2e%2e/etc/passwd", wantStatus: 400, wantCode: badPath, wantInMsg: "above the root"},
		{name: "dot-dot with parameters", target: "/public/..;/admin/x", wantStatus: 400, wantCode: badPath, wantInMsg: `"..;"`},
		{name: "path parameters", method: "POST", target: "/admin;jsessionid=x", lines: []string{"Content-Length: 0"},
			wantStatus: 400, wantCode: badPath, wantInMsg: `parameters (";jsessionid=x")`},
		{name: "path parameters inside", target: "/admin;x/x", wantStatus: 400, wantCode: badPath, wantInMsg: `parameters (";x")`},
		{name: "path parameters in a later segment", target: "/a;x/b", wantStatus: 400, wantCode: badPath, wantInMsg: `parameters (";x")`},
		{name: "empty path parameters", target: "/admin/x;", wantStatus: 400, wantCode: badPath, wantInMsg: `parameters (";")`},
		{name: "path parameters after an escape", target: "/%61dmin;x/x", wantStatus: 400, wantCode: badPath, wantInMsg: `parameters (";x")`},
		{name: "encoded semicolon", target: "/admin%3Bx/x", wantStatus: 400, wantCode: badPath, wantInMsg: "(%3B)"},
		{name: "encoded semicolon lower case", target: "/admin%3bjsessionid=x", wantStatus: 400, wantCode: badPath, wantInMsg: "(%3B)"},
		{name: "dot segment with empty parameters", target: "/public/.;/admin/x", wantStatus: 400, wantCode: badPath, wantInMsg: `".;"`},
		{name: "asterisk form", target: "*", wantStatus: 400, wantCode: badPath, wantInMsg: "must be a path"},
		{name: "CONNECT", method: "CONNECT", target: "admin.example:443", wantStatus: 400, wantCode: badPath, wantInMsg: "CONNECT"},
		{name: "absolute form without a path", target: "http://other.example", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/"},
		{name: "OPTIONS asterisk is Go's own", method: "OPTIONS", target: "*", wantStatus: 200}, // answered by net/http, never forwarded

		{name: "strip prefix onto base", target: "/public/a/b?x=1", wantStatus: 200, wantPolicy: "public-ip",
			wantUp: "public", wantURI: "/static/a/b?x=1"},
		{name: "strip prefix after cleaning", target: "/public/a/../b//c/.", wantStatus: 200, wantPolicy: "public-ip",
			wantUp: "public", wantURI: "/static/b/c/"},
		{name: "strip prefix, encoded dots", target: "/public/%2e/b", wantStatus: 200, wantPolicy: "public-ip",
			wantUp: "public", wantURI: "/static/b"},
		{name: "dot-dot out of a route", target: "/public/..", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/"},
		{name: "other escapes kept", target: "/public/b%20c/%3F%23%25", wantStatus: 200, wantPolicy: "public-ip",
			wantUp: "public", wantURI: "/static/b%20c/%3F%23%25"},
		{name: "hex case normalised", target: "/a/%c3%a9", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/a/%C3%A9"},
		{name: "raw UTF-8", target: "/caf\xc3\xa9", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/caf%C3%A9"},
		{name: "overlong dots stay bytes", target: "/v1/%C0%AE%C0%AE/admin", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/v1/%C0%AE%C0%AE/admin"},
		{name: "paths are case-sensitive", target: "/ADMIN/x", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/ADMIN/x"},
		{name: "query is not path", target: "/v1/x?next=/../admin/x", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/v1/x?next=/../admin/x"},
		{name: "semicolon query cleaned", target: "/v1/x?a=1;b=2&c=3", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/v1/x?c=3"},
		{name: "hash is data", target: "/v1/x#frag", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/v1/x%23frag"},
		{name: "long clean path", target: strings.Repeat("/a/..", 800) + "/admin/x", wantStatus: adminDenied, wantPolicy: "admin-closed"},
		{name: "path over the header limit", target: "/" + strings.Repeat("a", 40<<10), wantStatus: 431, wantCode: 43100,
			wantInMsg: "exceed"},

		{name: "HEAD judged by a GET route", method: "HEAD", target: "/reports/x", wantStatus: adminDenied, wantPolicy: "reports-closed"},
		{name: "GET route", target: "/reports/x", wantStatus: adminDenied, wantPolicy: "reports-closed"},
		{name: "POST passes a GET route by", method: "POST", target: "/reports/x", lines: []string{"Content-Length: 0"},
			wantStatus: 200, wantPolicy: "default-ip", wantUp: "api", wantURI: "/reports/x"},
	}
	runHostile(t, gw, rec, rows)
}

// TestHostilePathParametersStripped: with server.path_parameters: strip a
// path's parameters are dropped before the route is matched, and the path
// without them is what the upstream receives; what stays ambiguous (an
// encoded ";", a dot segment with parameters) is still refused.
func TestHostilePathParametersStripped(t *testing.T) {
	rec := &recorder{}
	admin, public, api := rec.upstream(t, "admin"), rec.upstream(t, "public"), rec.upstream(t, "api")
	yaml := strings.Replace(hostileConfig, "server:\n", "server:\n  path_parameters: strip\n", 1)
	snap := compileYAML(t, fmt.Sprintf(yaml, "", admin.URL, public.URL, api.URL))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	const badPath = 40000
	rows := []hostileRow{
		{name: "parameters do not escape a route", method: "POST", target: "/admin;jsessionid=x", lines: []string{"Content-Length: 0"},
			wantStatus: 429, wantPolicy: "admin-closed"},
		{name: "parameters inside", target: "/admin;x/x", wantStatus: 429, wantPolicy: "admin-closed"},
		{name: "forwarded without them", target: "/public;x/a;y=1/b;?q=1", wantStatus: 200, wantPolicy: "public-ip",
			wantUp: "public", wantURI: "/static/a/b?q=1"},
		{name: "a segment of parameters only", target: "/a/;x/b", wantStatus: 200, wantPolicy: "default-ip",
			wantUp: "api", wantURI: "/a/b"},
		{name: "encoded semicolon", target: "/admin%3Bx/x", wantStatus: 400, wantCode: badPath, wantInMsg: "(%3B)"},
		{name: "dot-dot with parameters", target: "/public/..;/admin/x", wantStatus: 400, wantCode: badPath, wantInMsg: `"..;"`},
	}
	runHostile(t, gw, rec, rows)
}

// TestHostileHeaders: what is judged is what is forwarded; the headers a
// client could use to pick its identity never reach the upstream from an
// untrusted peer.
func TestHostileHeaders(t *testing.T) {
	gw, rec := newHostileGateway(t, "")
	const badReq = 40000
	clientIPHeaders := []string{"X-Real-IP", "True-Client-IP", "X-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Cluster-Client-IP"}
	var spoofLines []string
	noneOfThem := map[string]string{"X-Forwarded-For": "127.0.0.1", "Forwarded": ""}
	for _, h := range clientIPHeaders {
		spoofLines = append(spoofLines, h+": 6.6.6.6")
		noneOfThem[h] = ""
	}
	rows := []hostileRow{
		{name: "key header named in Connection", target: "/keyed/x",
			lines:      []string{"Connection: X-API-Key, X-User", "X-API-Key: sk-known", "X-User: u1"},
			wantStatus: 200, wantPolicy: "per-user", wantUp: "api", wantURI: "/keyed/x",
			wantHeaders: map[string]string{"X-Api-Key": "", "X-User": "", "Connection": ""}},
		{name: "standard hop-by-hop headers", target: "/keyed/x",
			lines:      []string{"Keep-Alive: timeout=5", "Proxy-Authorization: Basic eA==", "Proxy-Connection: x", "X-User: u1"},
			wantStatus: 200, wantPolicy: "per-user", wantUp: "api", wantURI: "/keyed/x",
			wantHeaders: map[string]string{"Keep-Alive": "", "Proxy-Authorization": "", "Proxy-Connection": "", "X-User": "u1"}},
		{name: "duplicate API key", target: "/keyed/x", lines: []string{"X-API-Key: guess-1", "X-API-Key: sk-known"},
			wantStatus: 400, wantCode: badReq, wantInMsg: `header "X-Api-Key" appears 2 times`},
		{name: "duplicate API key by case", target: "/x", lines: []string{"x-api-key: guess-1", "X-API-KEY: sk-known"},
			wantStatus: 400, wantCode: badReq, wantInMsg: `header "X-Api-Key" appears 2 times`},
		{name: "API key with underscores", target: "/x", lines: []string{"X_API_Key: guess-1", "X-API-Key: sk-known"},
			wantStatus: 400, wantCode: badReq, wantInMsg: `"X_api_key"`},
		{name: "duplicate key header of the route", target: "/keyed/x", lines: []string{"X-User: a", "X-User: b"},
			wantStatus: 400, wantCode: badReq, wantInMsg: `header "X-User" appears 2 times`},
		{name: "duplicate header of another route's key", target: "/x", lines: []string{"X-User: a", "X-User: b"},
			wantStatus: 200, wantPolicy: "default-ip", wantUp: "api", wantURI: "/x",
			wantHeaders: map[string]string{"X-User": "a|b"}},
		{name: "duplicate query key", target: "/query/x?user=a&user=b",
			wantStatus: 400, wantCode: badReq, wantInMsg: `query parameter "user" appears 2 times`},
		{name: "query key hidden behind a semicolon", target: "/query/x?user=a;user=b&user=c",
			wantStatus: 200, wantPolicy: "per-q", wantUp: "api", wantURI: "/query/x?user=c"},
		{name: "spoofed client address headers", target: "/x",
			lines:      append([]string{"X-Forwarded-For: 6.6.6.6", "Forwarded: for=6.6.6.6"}, spoofLines...),
			wantStatus: 200, wantPolicy: "default-ip", wantUp: "api", wantURI: "/x", wantHeaders: noneOfThem},
		{name: "host route", target: "/x", lines: []string{"Host: admin.example"},
			wantStatus: 429, wantPolicy: "host-closed"},
		{name: "host with case, dot and port", target: "/x", lines: []string{"Host: ADMIN.Example.:8080"},
			wantStatus: 429, wantPolicy: "host-closed"},
		{name: "absolute form names the host", target: "http://admin.example/x", lines: []string{"Host: other.example"},
			wantStatus: 429, wantPolicy: "host-closed"},
		{name: "two Host lines", target: "/x", lines: []string{"Host: other.example", "Host: admin.example"},
			wantStatus: 400},
	}
	runHostile(t, gw, rec, rows)

	t.Run("trusted proxy keeps its client headers", func(t *testing.T) {
		gw, rec := newHostileGateway(t, "127.0.0.0/8")
		want := map[string]string{"X-Forwarded-For": "6.6.6.6, 127.0.0.1"}
		for _, h := range clientIPHeaders {
			want[h] = "6.6.6.6"
		}
		runHostile(t, gw, rec, []hostileRow{{name: "trusted", target: "/x",
			lines:      append([]string{"X-Forwarded-For: 6.6.6.6"}, spoofLines...),
			wantStatus: 200, wantPolicy: "default-ip", wantUp: "api", wantURI: "/x", wantHeaders: want}})
	})
}

// guessConfig: an API route with a per-IP limit and a tenant policy that
// rejects unknown keys; a route keyed on the API key alone with the default
// on_missing_key (shared); a route keyed on header:X-User+ip behind a per-IP
// limit.
const guessConfig = `
tenants:
  header: X-API-Key
  keys:
    sk-known: {tenant: acme, plan: free}
routes:
  - {name: api, match: {path_prefix: /v1}, upstream: "%[1]s", policies: [per-ip-api, per-tenant]}
  - {name: hop, match: {path_prefix: /hop}, upstream: "%[1]s", policies: [per-key]}
  - {name: users, match: {path_prefix: /users}, upstream: "%[1]s", policies: [per-ip-users, per-user]}
policies:
  per-ip-api: {key: ip, rate: 10, per: 1m}
  per-tenant: {key: tenant, rate: 100, per: 1m, on_missing_key: reject}
  per-key: {key: api_key, rate: 2, per: 1m}
  per-ip-users: {key: ip, rate: 10, per: 1m}
  per-user: {key: "header:X-User+ip", rate: 2, per: 1m}
`

// TestKeyGuessingIsLimited: a client that rotates keys or header values
// never gets more than its per-IP limit, whatever it sends.
func TestKeyGuessingIsLimited(t *testing.T) {
	type run struct {
		n      int
		status int
		policy string // the policy named in the answer
	}
	tests := []struct {
		name     string
		target   string
		lines    func(i int) []string
		want     []run
		wantUp   int    // requests the upstream received
		noHeader string // a header the upstream must never receive
	}{
		{name: "rotating API keys", target: "/v1/x",
			lines:  func(i int) []string { return []string{fmt.Sprintf("X-API-Key: guess-%d", i)} },
			want:   []run{{10, 401, "per-tenant"}, {30, 429, "per-ip-api"}},
			wantUp: 0},
		{name: "rotating keys named in Connection", target: "/hop/x",
			lines: func(i int) []string {
				return []string{"Connection: X-API-Key", fmt.Sprintf("X-API-Key: guess-%d", i)}
			},
			want:   []run{{2, 200, "per-key"}, {8, 429, "per-key"}},
			wantUp: 2, noHeader: "X-Api-Key"},
		{name: "rotating X-User values", target: "/users/x",
			lines:  func(i int) []string { return []string{fmt.Sprintf("X-User: u%d", i)} },
			want:   []run{{10, 200, "per-ip-users"}, {10, 429, "per-ip-users"}},
			wantUp: 10},
		{name: "rotating first of two API keys", target: "/v1/x",
			lines: func(i int) []string {
				return []string{fmt.Sprintf("X-API-Key: guess-%d", i), "X-API-Key: sk-known"}
			},
			want:   []run{{20, 400, ""}},
			wantUp: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			up := rec.upstream(t, "api")
			snap := compileYAML(t, fmt.Sprintf(guessConfig, up.URL))
			gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
			addr := strings.TrimPrefix(gw.URL, "http://")
			i := 0
			for _, w := range tt.want {
				for range w.n {
					i++
					r := rawExchange(t, addr, "GET", buildRaw("GET", tt.target, addr, tt.lines(i)))
					if r.status != w.status {
						t.Fatalf("request %d: status got %d, want %d (body %s)", i, r.status, w.status, r.body)
					}
					if p := judgedBy(t, r); p != w.policy && w.status != 200 {
						t.Fatalf("request %d: policy got %q, want %q", i, p, w.policy)
					}
				}
			}
			got := rec.take()
			if len(got) != tt.wantUp {
				t.Errorf("upstream received %d requests, want %d", len(got), tt.wantUp)
			}
			for _, g := range got {
				if tt.noHeader != "" && len(g.header.Values(tt.noHeader)) > 0 {
					t.Errorf("upstream received %s: %q, want none (it was not judged)", tt.noHeader, g.header.Values(tt.noHeader))
				}
			}
		})
	}
}
