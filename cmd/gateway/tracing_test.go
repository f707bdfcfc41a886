package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/otlptest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

const tracingConfig = `
server:
  listen: 127.0.0.1:0
  trusted_proxies: [127.0.0.1/32]
admin: {listen: "127.0.0.1:0"}
log: {access: true}
redis:
  addrs: [%s]
  timeout: 2s
  queue_timeout: 2s
tracing: {enabled: true, endpoint: "%s", sample_ratio: 1, service_name: gw-e2e}
tenants:
  header: Authorization
  keys:
    sk-e2e-secret-key: {tenant: acme, plan: free}
routes:
  - name: api
    match: {path_prefix: /api/}
    upstream: "%s"
    policies: [per-tenant]
  - name: llm
    match: {path_prefix: /v1/}
    upstream: builtin:openai-mock
    llm: openai
    policies: [daily-tokens]
policies:
  per-tenant: {key: tenant, algorithm: gcra, rate: 20, per: 1h, burst: 20, on_missing_key: reject}
  daily-tokens: {key: tenant, cost: tokens, algorithm: fixed_window, rate: 100000, window: day, on_missing_key: reject}
`

// gateway serve with tracing on, Redis and a trusted proxy in front: the
// spans reach a real OTLP receiver by the end of the drain; a continued
// trace reaches the upstream; concurrent decisions share Redis round trips
// whose spans link to them; an LLM call's span has the model and its
// tokens; a refusal's span says why; the access log names each trace; no
// span holds the key.
func TestTracingThroughServe(t *testing.T) {
	s := redistest.Start(t)
	rc := otlptest.NewReceiver(t)
	var mu sync.Mutex
	var upParents []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upParents = append(upParents, r.Header.Get("Traceparent"))
		mu.Unlock()
		w.Write([]byte("ok\n"))
	}))
	t.Cleanup(up.Close)
	g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(tracingConfig, s.Addr(), rc.URL, up.URL)))
	c := clienttest.New(t, 24)
	auth := []string{"Authorization", "Bearer sk-e2e-secret-key"}

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	if r := mustSend(t, c, "GET", g.base+"/api/first", append(auth, "Traceparent", "00-"+traceID+"-b7ad6b7169203331-01")...); r.status != http.StatusOK {
		t.Fatalf("first request: got %d, want 200", r.status)
	}
	// A trace the trusted proxy chose not to record: passed on unrecorded,
	// with a span ID of the gateway's, and named in the access log.
	const quietID = "5b8efff798038103d269b633813fc60c"
	if r := mustSend(t, c, "GET", g.base+"/api/quiet", append(auth, "Traceparent", "00-"+quietID+"-eee19b7ec3c1b174-00")...); r.status != http.StatusOK {
		t.Fatalf("unrecorded request: got %d, want 200", r.status)
	}
	mu.Lock()
	first, quiet := upParents[0], upParents[1]
	mu.Unlock()
	if !regexp.MustCompile(`^00-`+quietID+`-[0-9a-f]{16}-00$`).MatchString(quiet) || strings.Contains(quiet, "eee19b7ec3c1b174") {
		t.Errorf("upstream got traceparent %q for the unrecorded trace, want 00-%s-<the gateway's span>-00", quiet, quietID)
	}

	// 18 more at once use the tenant's burst up; then one is refused.
	var wg sync.WaitGroup
	for range 18 {
		wg.Go(func() {
			if r, err := send(c, "GET", g.base+"/api/many", auth...); err != nil || r.status != http.StatusOK {
				t.Errorf("concurrent request: %v %d, want 200", err, r.status)
			}
		})
	}
	wg.Wait()
	if r := mustSend(t, c, "GET", g.base+"/api/over", auth...); r.status != http.StatusTooManyRequests {
		t.Fatalf("request past the burst: got %d, want 429", r.status)
	}
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`
	req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-e2e-secret-key")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("llm call: got %d, want 200", resp.StatusCode)
	}

	// The drain flushes the spans: nothing is waited for beyond it.
	g.stop()
	select {
	case <-g.done:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not return within 20s")
	}
	spans := rc.Spans()

	byName := map[string][]otlptest.Span{}
	byID := map[string]otlptest.Span{}
	for _, sp := range spans {
		byName[sp.Name] = append(byName[sp.Name], sp)
		byID[sp.SpanID] = sp
		for k, v := range sp.Attrs {
			if strings.Contains(fmt.Sprint(v), "sk-e2e-secret-key") {
				t.Errorf("span %q: attribute %s holds the API key", sp.Name, k)
			}
		}
		if sp.Resource["service.name"] != "gw-e2e" {
			t.Errorf("span %q: service.name %v, want gw-e2e", sp.Name, sp.Resource["service.name"])
		}
	}
	if n := len(byName["GET api"]); n != 20 {
		t.Fatalf("api server spans: got %d, want 20, the unrecorded request's not among them (spans: %d)", n, len(spans))
	}
	for _, sp := range spans {
		if sp.TraceID == quietID {
			t.Errorf("span %q recorded in the trace the proxy did not record", sp.Name)
		}
	}
	var continued, refused *otlptest.Span
	for i, sp := range byName["GET api"] {
		if sp.Attrs["gateway.tenant"] != "acme" || sp.Attrs["gateway.policy"] != "per-tenant" {
			t.Errorf("api span attributes: %v, want tenant acme and policy per-tenant", sp.Attrs)
		}
		switch {
		case sp.TraceID == traceID:
			continued = &byName["GET api"][i]
		case sp.Attrs["gateway.outcome"] == "limited":
			refused = &byName["GET api"][i]
		}
	}
	if continued == nil || continued.ParentSpanID != "b7ad6b7169203331" {
		t.Fatalf("no server span continues the trusted proxy's trace %s", traceID)
	}
	upSpan := ""
	for _, sp := range byName["upstream api"] {
		if sp.ParentSpanID == continued.SpanID {
			upSpan = sp.SpanID
		}
	}
	if want := "00-" + traceID + "-" + upSpan + "-01"; upSpan == "" || first != want {
		t.Errorf("upstream got traceparent %q, want %q (the continued trace's upstream span)", first, want)
	}
	if refused == nil || !strings.Contains(fmt.Sprint(refused.Attrs["gateway.refusal"]), "per-tenant") || refused.Attrs["http.response.status_code"] != int64(429) {
		t.Errorf("refused request's span: %+v, want a 429 saying which policy refused", refused)
	}

	// Every decision on Redis links to a round trip that names the node
	// and links back; at least one carried several decisions.
	shared := 0
	for _, d := range byName["ratelimit decide"] {
		parent, ok := byID[d.ParentSpanID]
		if !ok || parent.Kind.String() != "SPAN_KIND_SERVER" {
			t.Errorf("decide span's parent %s is no server span", d.ParentSpanID)
		}
		if d.Attrs["gateway.backend"] != "redis" || d.Attrs["server.address"] != "127.0.0.1" || len(d.Links) == 0 {
			t.Errorf("decide span: %v links %v, want the redis backend, its node and a link", d.Attrs, d.Links)
		}
		for _, l := range d.Links {
			p, ok := byID[l.SpanID]
			if !ok || !strings.HasPrefix(p.Name, "redis ") || p.ParentSpanID != "" || p.Attrs["server.port"] != fmt.Sprint(s.Port()) {
				t.Errorf("decide span links %v: want a root redis span on port %d, got %+v", l, s.Port(), p)
			}
			if len(p.Links) > 1 {
				shared++
			}
		}
	}
	t.Logf("%d spans; %d decisions linked to round trips shared with another decision", len(spans), shared)

	llm := byName["POST llm"]
	if len(llm) != 1 {
		t.Fatalf("llm server spans: got %d, want 1", len(llm))
	}
	if a := llm[0].Attrs; a["gen_ai.request.model"] != "gpt-4o-mini" || a["gen_ai.usage.output_tokens"] == nil || a["gen_ai.usage.input_tokens"] == nil ||
		a["gen_ai.usage.output_tokens"].(int64) <= 0 {
		t.Errorf("llm span attributes: %v, want the model and its token counts", a)
	}

	// The access log names each request's trace.
	line := regexp.MustCompile(`msg=request .*path=/api/first .*trace_id=` + traceID)
	if n := g.countLogRE(line); n != 1 {
		t.Errorf("access log lines of the continued request with its trace_id: got %d, want 1", n)
	}
	if n := g.countLogRE(regexp.MustCompile(`msg=request .*path=/api/quiet .*trace_id=` + quietID)); n != 1 {
		t.Errorf("access log lines of the unrecorded request with its trace_id: got %d, want 1", n)
	}
}

// countLogRE counts the log lines matching re.
func (g *gateway) countLogRE(re *regexp.Regexp) int {
	g.log.mu.Lock()
	defer g.log.mu.Unlock()
	n := 0
	for _, l := range g.log.lines {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}
