package main

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
)

// azureSDKConfig is an llm: azure route onto an Azure OpenAI mock (UP):
// a deployment mapped to its model, the operator's key upstream, a
// per-minute request limit for sk-limited and a daily token budget the
// test spends for sk-spent.
const azureSDKConfig = `
server:
  listen: 127.0.0.1:0
tenants:
  keys:
    sk-minute: {tenant: minute, plan: free}
    sk-limited: {tenant: limited, plan: limited}
    sk-spent: {tenant: spent, plan: spent}
routes:
  - name: azure
    match: {path_prefix: /openai/}
    upstream: UP
    llm: azure
    upstream_api_key: azure-operator-key
    deployments: {chat: gpt-4o-mini}
    policies: [minute, daily]
policies:
  minute: {key: tenant, rate: 1000, per: 30s, plans: {limited: 1}, on_missing_key: reject}
  daily: {key: tenant, cost: tokens, rate: 1000000000, per: 24h, plans: {spent: 300}, on_missing_key: reject}
`

// The openai package's AzureOpenAI client, unmodified, against an llm:
// azure route: a call and a stream with usage through the deployment's
// path, with the tenant's key in api-key and the operator's upstream; a
// stream under an API version that takes no stream_options; its
// RateLimitError on a per-minute limit; and, with its default retries, a
// spent day's refusal raised at once (x-should-retry: false,
// insufficient_quota).
func TestAzureOpenAISDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: the SDK check needs Node.js (make test installs it as root, or: apt-get install -y nodejs npm)")
	}
	if ok, _ := filepath.Glob(filepath.Join(sdkCheckDir, "node_modules", "openai", "package.json")); len(ok) == 0 {
		t.Fatalf("openai is not installed: run 'npm ci --prefix cmd/gateway/%s' (make test does)", sdkCheckDir)
	}
	mock := builtin.AzureMock(builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 40}))
	keys := make(chan string, 64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get("Api-Key") + " " + r.Header.Get("Authorization")
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	g := startGateway(t, "azure", writePressureConfig(t, strings.ReplaceAll(azureSDKConfig, "UP", up.URL)))
	chat := g.base + "/openai/deployments/chat/chat/completions?api-version=2024-10-21"
	if status := azureCall(t, chat, "sk-limited"); status != http.StatusOK {
		t.Fatalf("sk-limited's first call: %d, want 200", status)
	}
	for range 20 {
		if azureCall(t, chat, "sk-spent") == http.StatusTooManyRequests {
			break
		}
	}

	steps := runNodeSteps(t, 2*time.Minute, node, filepath.Join(sdkCheckDir, "azure.mjs"), g.base, "sk-minute", "sk-spent", "sk-limited")
	num := func(step, field string) float64 { v, _ := steps[step][field].(float64); return v }
	if num("plain", "total_tokens") <= 0 || num("plain", "content") <= 0 {
		t.Errorf("plain call: got %v, want a completion with usage", steps["plain"])
	}
	if num("stream", "chunks") < 3 || num("stream", "total_tokens") <= 0 {
		t.Errorf("stream: got %v, want chunks and the usage chunk", steps["stream"])
	}
	if num("stream_old_version", "chunks") < 3 {
		t.Errorf("stream under 2024-06-01: got %v, want chunks (the mock refuses stream_options there, as Azure does)", steps["stream_old_version"])
	}
	if s := steps["rate_limited"]; s["ok"] != false || s["rate_limit_error"] != true || num("rate_limited", "status") != 429 || s["code"] != "429" {
		t.Errorf("per-minute limit: got %v, want the SDK's RateLimitError (429, code 429)", s)
	}
	if s := steps["spent"]; s["ok"] != false || s["rate_limit_error"] != true || num("spent", "attempts") != 1 || num("spent", "ms") > 3000 ||
		s["code"] != "insufficient_quota" || s["should_retry"] != "false" {
		t.Errorf("spent day: got %v, want one attempt raised at once (429, insufficient_quota, x-should-retry: false)", s)
	}
	close(keys)
	for k := range keys {
		if k != "azure-operator-key " {
			t.Errorf("upstream saw api-key and authorization %q, want the operator's key in api-key alone", k)
		}
	}
}

// azureCall makes one chat call with key in api-key and returns its status.
func azureCall(t *testing.T, url, key string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"messages":[{"role":"user","content":"Tell me about rate limits."}],"max_tokens":50}`))
	req.Header.Set("Api-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
