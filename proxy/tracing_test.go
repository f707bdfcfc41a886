package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/otlptest"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/tracing"
)

// The client's trace, as a trusted proxy in front would pass it.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	clientState   = "vendor=opaque"
	tenantKey     = "sk-secret-tenant-key-0123456789"
	querySecret   = "token=query-secret-0123456789"
)

// newTracing is a provider exporting to a fresh in-process OTLP receiver at
// ratio; flush exports what is buffered and stops it.
func newTracing(t *testing.T, ratio float64) (*tracing.Provider, *otlptest.Receiver, func() []otlptest.Span) {
	t.Helper()
	rc := otlptest.NewReceiver(t)
	tp, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Endpoint: rc.URL, SampleRatio: &ratio, ServiceName: "gateway-test"}, tracing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	flush := func() []otlptest.Span {
		once.Do(func() {
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		return rc.Spans()
	}
	t.Cleanup(func() { flush() })
	return tp, rc, flush
}

// headerRecorder is an upstream that keeps the trace headers of each
// request it gets.
type headerRecorder struct {
	mu     sync.Mutex
	parent []string
	state  []string
}

func (u *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.parent = append(u.parent, r.Header.Get("Traceparent"))
	u.state = append(u.state, r.Header.Get("Tracestate"))
	u.mu.Unlock()
	w.Write([]byte("ok\n"))
}

func (u *headerRecorder) last(t *testing.T) (parent, state string) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.parent) == 0 {
		t.Fatal("the upstream got no request")
	}
	return u.parent[len(u.parent)-1], u.state[len(u.state)-1]
}

func spansNamed(spans []otlptest.Span, name string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func oneSpan(t *testing.T, spans []otlptest.Span, name string) otlptest.Span {
	t.Helper()
	got := spansNamed(spans, name)
	if len(got) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("spans named %q: got %d, want 1 (all: %q)", name, len(got), names)
	}
	return got[0]
}

func wantAttr(t *testing.T, s otlptest.Span, key string, want any) {
	t.Helper()
	if got, ok := s.Attrs[key]; !ok || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("span %q: %s = %v (present %v), want %v", s.Name, key, got, ok, want)
	}
}

// noSecretIn fails if any attribute of any span holds one of secrets.
func noSecretIn(t *testing.T, spans []otlptest.Span, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		for k, v := range s.Attrs {
			for _, secret := range secrets {
				if strings.Contains(fmt.Sprint(v), secret) {
					t.Errorf("span %q: attribute %s = %v holds a secret", s.Name, k, v)
				}
			}
		}
	}
}

// transports are the upstream transports tested here: net/http's (the
// lean one, proxy/h1's, is tested with the handler in proxy/h1).
var transports = []struct {
	name string
	new  func() closingTransport
}{
	{"standard", func() closingTransport { return NewStandardTransport() }},
}

// A request from a trusted proxy continues the client's trace: the server
// span's parent is the client's span, the decision and the upstream
// exchange are its children, and the upstream receives a traceparent whose
// parent is the exchange's span; the tenant is named, its key and the query
// never. The next request is refused, and its span says why. Both
// transports carry the trace.
func TestTracingContinuesTrustedTraceUpstream(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			tp, _, flush := newTracing(t, 1)
			up := &headerRecorder{}
			upSrv := newUpstream(t, up)
			snap := testSnapshot(t, []string{"127.0.0.1/32", "::1/128"}, testRoute(t, "api", "/", upSrv.URL,
				testPolicy(t, "per-tenant", "tenant", perMinute(1, 1), policies.MissingReject)))
			snap.Tenants.Keys[tenantKey] = policies.Tenant{Name: "acme", Plan: "free"}
			gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{tracing: tp.TracerProvider(), transport: tr.new()})

			hdr := http.Header{"Traceparent": {clientParent}, "Tracestate": {clientState}, "X-Api-Key": {tenantKey}}
			if r := do(t, http.DefaultClient, "GET", gw.URL+"/v1/things?"+querySecret, nil, hdr); r.status != http.StatusOK {
				t.Fatalf("first request: got %d, want 200", r.status)
			}
			upParent, upState := up.last(t)
			if r := do(t, http.DefaultClient, "GET", gw.URL+"/v1/things", nil, hdr); r.status != http.StatusTooManyRequests {
				t.Fatalf("second request: got %d, want 429", r.status)
			}
			spans := flush()

			servers := spansNamed(spans, "GET api")
			if len(servers) != 2 {
				t.Fatalf("server spans: got %d, want 2 (%+v)", len(servers), spans)
			}
			var ok, refused otlptest.Span
			for _, s := range servers {
				if s.Attrs["gateway.outcome"] == "allowed" {
					ok = s
				} else {
					refused = s
				}
			}
			for _, s := range servers {
				if s.TraceID != clientTraceID || s.ParentSpanID != clientSpanID {
					t.Errorf("server span: trace %s parent %s, want the client's %s and %s", s.TraceID, s.ParentSpanID, clientTraceID, clientSpanID)
				}
				if s.Kind.String() != "SPAN_KIND_SERVER" {
					t.Errorf("server span kind: got %s", s.Kind)
				}
				wantAttr(t, s, "gateway.route", "api")
				wantAttr(t, s, "gateway.tenant", "acme")
				wantAttr(t, s, "gateway.policy", "per-tenant")
				wantAttr(t, s, "url.path", "/v1/things")
				wantAttr(t, s, "http.request.method", "GET")
				if got := s.Resource["service.name"]; got != "gateway-test" {
					t.Errorf("service.name: got %v, want gateway-test", got)
				}
			}
			wantAttr(t, ok, "http.response.status_code", 200)
			wantAttr(t, refused, "http.response.status_code", 429)
			wantAttr(t, refused, "gateway.outcome", "limited")
			wantAttr(t, refused, "gateway.reason", "limited")
			if msg, _ := refused.Attrs["gateway.refusal"].(string); !strings.Contains(msg, "per-tenant") {
				t.Errorf("refused span: gateway.refusal = %q, want the 429's message naming the policy", msg)
			}
			if _, has := ok.Attrs["gateway.refusal"]; has {
				t.Errorf("admitted span carries gateway.refusal = %v", ok.Attrs["gateway.refusal"])
			}

			decides := spansNamed(spans, "ratelimit decide")
			if len(decides) != 2 {
				t.Fatalf("decide spans: got %d, want 2", len(decides))
			}
			for _, d := range decides {
				if d.ParentSpanID != ok.SpanID && d.ParentSpanID != refused.SpanID {
					t.Errorf("decide span's parent %s is neither server span", d.ParentSpanID)
				}
				wantAttr(t, d, "gateway.backend", "local")
			}
			upSpan := oneSpan(t, spans, "upstream api")
			if upSpan.ParentSpanID != ok.SpanID || upSpan.TraceID != clientTraceID {
				t.Errorf("upstream span: parent %s trace %s, want the admitted server span %s in %s", upSpan.ParentSpanID, upSpan.TraceID, ok.SpanID, clientTraceID)
			}
			wantAttr(t, upSpan, "http.response.status_code", 200)
			if want := "00-" + clientTraceID + "-" + upSpan.SpanID + "-01"; upParent != want {
				t.Errorf("upstream got traceparent %q, want %q", upParent, want)
			}
			if upState != clientState {
				t.Errorf("upstream got tracestate %q, want the trusted peer's %q", upState, clientState)
			}
			noSecretIn(t, spans, tenantKey, "query-secret")
		})
	}
}

// A peer that is not a trusted proxy cannot choose the trace: its
// traceparent (sampled) and tracestate are dropped, the request starts a
// trace of its own, recorded by the ratio alone, and the upstream hears of
// that trace instead. At ratio 0 nothing is recorded, whatever the client's
// flag says, and the upstream still gets a traceparent (not sampled).
func TestTracingIgnoresUntrustedTraceparent(t *testing.T) {
	for _, ratio := range []float64{1, 0} {
		for _, tr := range transports {
			t.Run(fmt.Sprintf("ratio=%v/%s", ratio, tr.name), func(t *testing.T) {
				tp, _, flush := newTracing(t, ratio)
				up := &headerRecorder{}
				upSrv := newUpstream(t, up)
				snap := testSnapshot(t, nil, testRoute(t, "api", "/", upSrv.URL,
					testPolicy(t, "per-ip", "ip", perMinute(100, 100), policies.MissingReject)))
				gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{tracing: tp.TracerProvider(), transport: tr.new()})
				hdr := http.Header{"Traceparent": {clientParent}, "Tracestate": {clientState}}
				for range 5 {
					if r := do(t, http.DefaultClient, "GET", gw.URL+"/x", nil, hdr); r.status != http.StatusOK {
						t.Fatalf("got %d, want 200", r.status)
					}
				}
				upParent, upState := up.last(t)
				spans := flush()
				if upState != "" {
					t.Errorf("upstream got tracestate %q from an untrusted client", upState)
				}
				parts := strings.Split(upParent, "-")
				if len(parts) != 4 || parts[1] == clientTraceID || len(parts[1]) != 32 {
					t.Fatalf("upstream got traceparent %q, want a trace of the gateway's own", upParent)
				}
				servers := spansNamed(spans, "GET api")
				if ratio == 0 {
					if len(spans) != 0 || parts[3] != "00" {
						t.Fatalf("ratio 0: got %d spans and flags %s upstream, want none recorded (00)", len(spans), parts[3])
					}
					return
				}
				if len(servers) != 5 {
					t.Fatalf("server spans: got %d, want 5", len(servers))
				}
				for _, s := range servers {
					if s.TraceID == clientTraceID || s.ParentSpanID != "" {
						t.Errorf("server span: trace %s parent %q, want a new root", s.TraceID, s.ParentSpanID)
					}
				}
				found := false
				for _, s := range servers {
					found = found || s.TraceID == parts[1]
				}
				if !found || parts[3] != "01" {
					t.Errorf("upstream got traceparent %q, want one of the recorded server spans' traces, sampled", upParent)
				}
			})
		}
	}
}

// With tracing off the gateway neither reads nor writes trace headers:
// what the client sent reaches the upstream as before.
func TestTracingOffLeavesHeadersAlone(t *testing.T) {
	up := &headerRecorder{}
	upSrv := newUpstream(t, up)
	snap := testSnapshot(t, nil, testRoute(t, "api", "/", upSrv.URL))
	gw, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	if h.tracer != nil {
		t.Fatal("tracer set without Config.Tracing")
	}
	do(t, http.DefaultClient, "GET", gw.URL+"/x", nil, http.Header{"Traceparent": {clientParent}})
	if got, _ := up.last(t); got != clientParent {
		t.Errorf("upstream got traceparent %q, want the client's %q untouched", got, clientParent)
	}
}
