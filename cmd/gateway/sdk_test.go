package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// sdkCheckDir holds the client SDKs (pinned in package.json and its lock)
// and check.mjs; make test installs them (npm ci) before the tests run.
const sdkCheckDir = "testdata/openai-sdk"

// sdkConfig is the default config with what the SDK check needs beside it:
// windows of seconds instead of a minute (so a retry waits seconds), and a
// tenant whose daily token budget the test spends.
func sdkConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	section := func(m map[string]any, name string) map[string]any {
		s, ok := m[name].(map[string]any)
		if !ok {
			t.Fatalf("gateway.yaml: no %s mapping", name)
		}
		return s
	}
	tenants := section(section(cfg, "tenants"), "keys")
	tenants["sk-sdk-spent"] = map[string]any{"tenant": "sdk-spent", "plan": "spent"}
	pols := section(cfg, "policies")
	for _, name := range []string{"llm-requests", "llm-tokens"} {
		section(pols, name)["per"] = sdkWindow
	}
	pols["llm-daily"] = map[string]any{"key": "tenant", "cost": "tokens", "rate": 1_000_000_000, "per": "24h",
		"plans": map[string]any{"spent": sdkDailyBudget}, "on_missing_key": "reject"}
	// An enforce: stream route whose tenants have a few tokens each: their
	// streams are ended when the tokens run out.
	pols["sdk-enforced"] = map[string]any{"key": "tenant", "cost": "tokens", "rate": sdkEnforcedQuota, "per": "24h", "on_missing_key": "reject"}
	for _, k := range sdkEnforcedKeys {
		tenants[k] = map[string]any{"tenant": k, "plan": "free"}
	}
	routes, _ := cfg["routes"].([]any)
	cfg["routes"] = append([]any{map[string]any{
		"name": "enforced", "match": map[string]any{"path_prefix": "/enforced/v1/", "methods": []any{"POST"}},
		"strip_prefix": "/enforced", "upstream": "builtin:openai-mock", "llm": "openai",
		"enforce": "stream", "stream_window": 16, "policies": []any{"sdk-enforced"},
	}}, routes...)
	found := false
	for _, r := range routes {
		if rt, ok := r.(map[string]any); ok && rt["name"] == "llm" {
			rt["policies"] = append(rt["policies"].([]any), "llm-daily")
			found = true
		}
	}
	if !found {
		t.Fatal("gateway.yaml: no route named llm")
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	sdkWindow      = "6s" // the default config's per-minute windows, shrunk
	sdkDailyBudget = 500  // tokens a day for sk-sdk-spent
	sdkMinuteKey   = "sk-demo-free"
	sdkNeverFits   = 5000 // max_tokens past the free plan's 1000 tokens
	// sdkEnforcedQuota is each enforced-stream tenant's tokens: fewer than
	// the built-in mock's 200-token completion, so every stream is ended.
	sdkEnforcedQuota = 100
	// aiSDKBackoff is the Vercel AI SDK's own retry schedule on a 429 that
	// carries no retry hint: 2 retries after 2 s and 4 s.
	aiSDKBackoff = 6 * time.Second
)

// sdkEnforcedKeys are the enforced-stream tenants' keys: openai's chat
// stream, openai 6.x's, and openai's Responses API stream.
var sdkEnforcedKeys = []string{"sk-sdk-enforced-1", "sk-sdk-enforced-2", "sk-sdk-enforced-3"}

// The SDKs clients use against an OpenAI-compatible endpoint, unmodified and
// with their default retries, against the default config: a plain call and
// a stream; then, each of openai (current major and 6.x), the AI SDK and
// LangChain: on a spent daily budget and on a call larger than the whole
// quota, openai and LangChain raise at once (one attempt, no wait) and the
// AI SDK after its own bounded backoff (3 attempts, about 6 s); on a
// per-minute limit each retries and succeeds. On an enforce: stream route,
// openai's chat stream (both majors) and Responses API stream, ended by the
// gateway when the tenant's tokens run out, end well-formed: no error,
// finish_reason "length" or response.incomplete, usage within the quota.
func TestClientSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: the SDK check needs Node.js (make test installs it as root, or: apt-get install -y nodejs npm)")
	}
	for _, pkg := range []string{"openai", "openai6", "ai", "@ai-sdk/openai", "@langchain/openai"} {
		if ok, _ := filepath.Glob(filepath.Join(sdkCheckDir, "node_modules", pkg, "package.json")); len(ok) == 0 {
			t.Fatalf("%s is not installed: run 'npm ci --prefix cmd/gateway/%s' (make test does)", pkg, sdkCheckDir)
		}
	}
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	g := startGateway(t, "gateway", sdkConfig(t))
	spendDailyBudget(t, g.base+"/v1/chat/completions")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(sdkCheckDir, "check.mjs"), g.base+"/v1", sdkMinuteKey, "sk-sdk-spent", fmt.Sprint(sdkNeverFits),
		g.base+"/enforced/v1", strings.Join(sdkEnforcedKeys, ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type step struct {
		Step, SDK, Error, Code string
		OK                     bool
		MS                     float64
		Attempts, Status       int
		Chunks                 int     `json:"chunks"`
		TotalTokens            float64 `json:"total_tokens"`
		Content                int     `json:"content"`
		Finish                 string  `json:"finish"`
	}
	steps := map[string]step{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var s step
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("check.mjs printed %q: %v", sc.Text(), err)
		}
		t.Logf("%s", sc.Text())
		steps[s.Step+"/"+s.SDK] = s
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("check.mjs failed: %v", err)
	}
	if s := steps["plain/"]; s.TotalTokens <= 0 || s.Content <= 0 {
		t.Errorf("plain call: got %+v, want a completion with usage", s)
	}
	if s := steps["stream/"]; s.Chunks < 3 || s.TotalTokens <= 0 {
		t.Errorf("stream: got %+v, want chunks and the usage chunk", s)
	}
	for _, name := range []string{"enforced_chat/openai", "enforced_chat/openai6", "enforced_responses/openai"} {
		s, ok := steps[name]
		want := "length"
		if strings.HasPrefix(name, "enforced_responses") {
			want = "response.incomplete:max_output_tokens"
		}
		// The built-in mock writes 200 tokens; the tenant has 100, the prompt included.
		if !ok || !s.OK || s.Finish != want || s.Chunks < 2 || s.TotalTokens <= 0 || s.TotalTokens > sdkEnforcedQuota {
			t.Errorf("%s: %+v (found %v), want a stream ended well-formed (%q) with usage in (0, %d]", name, s, ok, want, sdkEnforcedQuota)
		}
	}
	for _, sdk := range []string{"openai", "openai6", "ai-sdk", "langchain"} {
		for _, kind := range []string{"spent", "never_fits"} {
			s, ok := steps[kind+"/"+sdk]
			switch {
			case !ok:
				t.Errorf("%s %s: no result", sdk, kind)
			case s.OK:
				t.Errorf("%s %s: the call passed, want a refusal", sdk, kind)
			case sdk == "ai-sdk":
				// It honours no x-should-retry: its own backoff, bounded.
				if s.Attempts != 3 || s.MS < float64(aiSDKBackoff.Milliseconds())-500 || s.MS > float64(aiSDKBackoff.Milliseconds())+5000 {
					t.Errorf("%s %s: %d attempts in %.0f ms, want 3 over its own %s backoff", sdk, kind, s.Attempts, s.MS, aiSDKBackoff)
				}
			default:
				if s.Attempts != 1 || s.MS > 3000 || s.Status != http.StatusTooManyRequests || s.Code != "insufficient_quota" {
					t.Errorf("%s %s: %+v, want one attempt raised at once (429, insufficient_quota)", sdk, kind, s)
				}
			}
		}
		s := steps["per_minute/"+sdk]
		if !s.OK || s.Attempts < 2 {
			t.Errorf("%s per-minute limit: %+v, want a refusal, the SDK's own retry, then success", sdk, s)
		}
	}
}

// spendDailyBudget spends sk-sdk-spent's daily tokens with plain calls
// until the gateway refuses one.
func spendDailyBudget(t *testing.T, url string) {
	t.Helper()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Tell me about rate limits."}],"max_tokens":50}`
	for range 40 {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-sdk-spent")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("x-should-retry") != "false" {
				t.Fatalf("a spent daily budget: x-should-retry %q, want false", resp.Header.Get("x-should-retry"))
			}
			return
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("spending the daily budget: %d", resp.StatusCode)
		}
	}
	t.Fatal("the daily budget was never spent")
}

// testWriter sends a child's stderr to the test log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("check.mjs: %s", p)
	return len(p), nil
}
