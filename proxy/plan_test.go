package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// planYAML has an llm route whose calls a missing key condemns before their
// body is read, and that takes idempotency keys.
const planYAML = `
tenants: {header: X-API-Key, keys: {` + freeKey + `: {tenant: acme, plan: free}}}
routes:
  - {name: llm, match: {path_prefix: /llm/, methods: [POST]}, strip_prefix: /llm, upstream: UP, llm: openai,
     idempotency: {required: true}, policies: [calls-by-ip, tokens-by-ip, tokens-by-tenant]}
policies:
  calls-by-ip: {key: ip, rate: 1000, per: 1m}
  tokens-by-ip: {key: ip, cost: tokens, rate: 100000, per: 1m}
  tokens-by-tenant: {key: tenant, cost: tokens, rate: 100000, per: 1m, on_missing_key: reject}
`

// TestExplainIsThePlanServed: Explain renders the plan ServeHTTP serves, in
// the cases where the two were once written apart: a call without its key
// is judged before its body (so its idempotency key is never read, and only
// the policies counting requests decide it), and an upgrade on a route
// that counts tokens is refused before anything else.
func TestExplainIsThePlanServed(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	snap := compileYAML(t, strings.ReplaceAll(planYAML, "UP", up.URL))
	_, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	tests := []struct {
		name     string
		headers  []string
		readBody bool
		status   int // what Explain says and the Handler answers
		check    func(t *testing.T, e Explanation)
	}{
		{
			name: "call without its key, without an idempotency key", readBody: true, status: http.StatusUnauthorized,
			check: func(t *testing.T, e Explanation) {
				if !e.ReachesLimiter || e.RejectedBy != "tokens-by-tenant" {
					t.Fatalf("got reaches limiter %v, rejected by %q; want the limiter, then 401 by tokens-by-tenant", e.ReachesLimiter, e.RejectedBy)
				}
				if e.LLM == nil || !e.LLM.BeforeBody {
					t.Errorf("llm: got %+v, want a call judged before its body", e.LLM)
				}
				if p := policyNamed(e, "calls-by-ip"); p.Outcome != OutcomeChecked || p.Units != 1 {
					t.Errorf("calls-by-ip: got %s with %d units, want checked for 1", p.Outcome, p.Units)
				}
				if p := policyNamed(e, "tokens-by-ip"); p.Outcome != OutcomeSkipped || p.Note == "" {
					t.Errorf("tokens-by-ip: got %s (%q), want skipped with a note: it does not decide the call", p.Outcome, p.Note)
				}
				if id := e.Idempotency; id == nil || id.Present {
					t.Errorf("idempotency: got %+v, want the route's, its key not read", id)
				}
			},
		},
		{
			name: "call with its key, without an idempotency key", headers: []string{"X-API-Key", freeKey}, readBody: true,
			status: http.StatusBadRequest,
		},
		{
			// Without its body: an upgrade is refused before the body
			// would be read.
			name: "upgrade on a route that counts tokens", headers: []string{"X-API-Key", freeKey, "Idempotency-Key", "k-1", "Connection", "Upgrade", "Upgrade", "websocket"},
			status: http.StatusBadRequest,
			check: func(t *testing.T, e Explanation) {
				if !strings.Contains(e.Reason, "websocket") {
					t.Errorf("reason: got %q, want the upgrade refused", e.Reason)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			newReq := func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/llm/v1/chat/completions", strings.NewReader(explainChatBody))
				r.RemoteAddr = "203.0.113.7:51000"
				for i := 0; i+1 < len(tt.headers); i += 2 {
					r.Header.Add(tt.headers[i], tt.headers[i+1])
				}
				return r
			}
			e := Explain(snap, newReq(), ExplainOptions{ReadBody: tt.readBody})
			said := e.Status
			if e.ReachesLimiter && e.RejectedBy != "" {
				said = http.StatusUnauthorized
			}
			if said != tt.status {
				t.Fatalf("Explain: got %d (reaches limiter %v, %q), want %d", said, e.ReachesLimiter, e.Reason, tt.status)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, newReq())
			if rec.Code != tt.status {
				t.Fatalf("Handler: got %d %s, want %d as Explain said", rec.Code, rec.Body, tt.status)
			}
			if tt.check != nil {
				tt.check(t, e)
			}
		})
	}
}

// TestAccessLogOfARefusedPath: a request whose path cannot be made
// canonical is answered 400 and logged as received, like every other
// answer (the access log once read the canonical request, which such a
// request does not have).
func TestAccessLogOfARefusedPath(t *testing.T) {
	snap := compileYAML(t, `
log: {access: true}
routes:
  - {name: r, upstream: "http://127.0.0.1:9", match: {path_prefix: /}}
`)
	_, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	var logBuf syncBuffer
	h.access = slog.New(slog.NewJSONHandler(&logBuf, nil))
	for _, target := range []string{"/a%2Fb", "/../x"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("%s: got %d %s, want 400", target, rec.Code, rec.Body)
		}
	}
	if n := logBuf.count(`"status":400`); n != 2 {
		t.Fatalf("access lines with status 400: got %d, want 2", n)
	}
}
