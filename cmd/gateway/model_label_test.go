package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// modelLabelConfig prices one model and names another for the metrics;
// METRICS_MODELS is replaced by the test.
const modelLabelConfig = `
server: {listen: "127.0.0.1:0"}
admin: {token: t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4, metrics_models: METRICS_MODELS}
tenants:
  keys:
    sk-test: {tenant: acme}
prices:
  gpt-4o: {input: 2.5, output: 10}
  default: {input: 1, output: 1}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: "builtin:openai-mock", llm: openai, policies: [tokens]}
policies:
  tokens: {key: tenant, cost: tokens, rate: 100000000, per: 1h, on_missing_key: reject}
`

// Through "gateway serve": 80 made-up models sent before any real one
// leave the configured models (the price table's, admin.metrics_models)
// their own model label and are all counted as "other"; a reload that names
// one more model gives it a label from then on.
func TestModelLabelFollowsTheConfig(t *testing.T) {
	path := writePressureConfig(t, strings.Replace(modelLabelConfig, "METRICS_MODELS", "[gpt-4o-mini]", 1))
	g := startGateway(t, "gw", path)
	adm := g.adminBase(t)
	c := newTestClient(t)
	sent := 0
	call := func(model string) {
		t.Helper()
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
		req, err := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer sk-test")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s, want 200", model, resp.StatusCode, b)
		}
		sent++
	}
	labels := func() map[string]bool {
		t.Helper()
		// A call is counted once its handler returns, which can be after
		// the client has the answer: wait until every call sent is.
		var text []byte
		pollUntil(t, 10*time.Second, "every call counted in /metrics", func() bool {
			_, text = adminDo(t, "GET", adm+"/metrics", "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4")
			n, _ := scrapeLookup(t, text, "gateway_requests_total", "route=llm,outcome=allowed")
			return n == float64(sent)
		})
		got := map[string]bool{}
		for _, line := range strings.Split(string(text), "\n") {
			if rest, ok := strings.CutPrefix(line, "gateway_llm_tokens_total{"); ok {
				_, m, _ := strings.Cut(rest, `model="`)
				m, _, _ = strings.Cut(m, `"`)
				got[m] = true
			}
		}
		return got
	}
	for i := range 80 {
		call(fmt.Sprintf("made-up-%02d", i))
	}
	call("gpt-4o")
	call("gpt-4o-mini")
	if got := labels(); len(got) != 3 || !got["gpt-4o"] || !got["gpt-4o-mini"] || !got["other"] {
		t.Fatalf("model labels: got %v, want gpt-4o, gpt-4o-mini and other", got)
	}

	if err := os.WriteFile(path, []byte(strings.Replace(modelLabelConfig, "METRICS_MODELS", "[gpt-4o-mini, made-up-07]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := adminDo(t, "POST", adm+"/admin/reload", "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4"); code != http.StatusOK {
		t.Fatalf("reload: %d %s", code, body)
	}
	call("made-up-07")
	call("made-up-08")
	if got := labels(); len(got) != 4 || !got["made-up-07"] || got["made-up-08"] {
		t.Fatalf("model labels after the reload: got %v, want made-up-07 added, made-up-08 still other", got)
	}
}
