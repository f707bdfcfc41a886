package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// anthropicSDKDir holds Anthropic's official SDK (pinned in package.json)
// and check.mjs; make test installs it (npm ci) before the tests run.
const anthropicSDKDir = "testdata/anthropic-sdk"

// An unmodified @anthropic-ai/sdk pointed at the default config's anthropic
// route works: a plain call, a stream with usage, and its own
// RateLimitError (rate_limit_error, retry-after, anthropic-ratelimit-*)
// once the free plan's tokens run out. With its default retries it raises
// at once on a spent day (x-should-retry: false, no retry hint), and waits
// and succeeds after a per-minute refusal.
func TestAnthropicSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: the Anthropic SDK check needs Node.js (make test installs it as root, or: apt-get install -y nodejs npm)")
	}
	if ok, _ := filepath.Glob(filepath.Join(anthropicSDKDir, "node_modules", "@anthropic-ai", "sdk", "package.json")); len(ok) == 0 {
		t.Fatalf("the Anthropic SDK is not installed: run 'npm ci --prefix cmd/gateway/%s' (make test does)", anthropicSDKDir)
	}
	path := copyDefaultConfig(t)
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	g := startGateway(t, "gateway", path)
	steps := runAnthropicCheck(t, node, g.base+"/anthropic")
	num := func(step, field string) float64 { v, _ := steps[step][field].(float64); return v }
	if num("plain", "input_tokens") <= 0 || num("plain", "output_tokens") <= 0 || num("plain", "text") <= 0 {
		t.Fatalf("plain call: got %v, want a message with usage", steps["plain"])
	}
	if num("stream", "events") < 5 || num("stream", "output_tokens") <= 0 || num("stream", "input_tokens") <= 0 {
		t.Fatalf("stream: got %v, want events and the usage", steps["stream"])
	}
	rl := steps["rate_limited"]
	// The call reserves its 256-token cap and its prompt's bound: what
	// remains, as the header tells it, is less than that.
	remaining, err := strconv.Atoi(fmt.Sprint(rl["tokens_remaining"]))
	if rl["is_rate_limit_error"] != true || num("rate_limited", "status") != 429 || rl["type"] != "rate_limit_error" ||
		num("rate_limited", "retry_after") < 1 || err != nil || remaining < 0 || remaining >= 256+512 {
		t.Fatalf("out of tokens: got %v, want the SDK's RateLimitError (429, rate_limit_error, retry-after, anthropic-ratelimit-tokens-remaining below the call's reservation)", rl)
	}

	// enforce: stream: a stream that wants more than the tenant has is
	// ended, and the SDK reads a message cut at max_tokens with the usage
	// of the output that passed.
	enforced := startGateway(t, "enforced", writePressureConfig(t, anthropicEnforcedConfig))
	steps = runAnthropicCheck(t, node, enforced.base+"/anthropic", "enforced")
	e := steps["enforced"]
	if e["stop_reason"] != "max_tokens" || num("enforced", "output_tokens") <= 0 || num("enforced", "words") >= 200 {
		t.Fatalf("enforced stream: got %v, want stop_reason max_tokens, the output that passed, fewer than the mock's 200 words", e)
	}

	// Final refusals: the SDK with its default retries raises at once on a
	// spent day, and waits and succeeds after a per-minute refusal.
	final := startGateway(t, "final", writePressureConfig(t, anthropicFinalConfig))
	spendAnthropicDay(t, final.base+"/anthropic/v1/messages", "sk-spent")
	steps = runAnthropicCheck(t, node, final.base+"/anthropic", "final", "sk-spent", "sk-minute")
	if s := steps["spent"]; s["ok"] != false || num("spent", "attempts") != 1 || num("spent", "ms") > 3000 ||
		num("spent", "status") != 429 || s["type"] != "rate_limit_error" {
		t.Errorf("spent day: got %v, want one attempt raised at once (429, rate_limit_error)", s)
	}
	if s := steps["per_minute"]; s["ok"] != true || num("per_minute", "attempts") < 2 || num("per_minute", "spent_calls") < 1 {
		t.Errorf("per-minute limit: got %v, want a refusal, the SDK's own wait and retry, then success", s)
	}
}

// anthropicFinalConfig is an anthropic route with tokens a few seconds
// (a per-minute limit, shrunk) and a daily budget the test spends.
const anthropicFinalConfig = `
server:
  listen: 127.0.0.1:0
tenants:
  keys:
    sk-spent: {tenant: spent, plan: spent}
    sk-minute: {tenant: minute, plan: free}
routes:
  - name: anthropic
    match: {path_prefix: /anthropic/v1/, methods: [POST]}
    strip_prefix: /anthropic
    upstream: builtin:anthropic-mock
    llm: anthropic
    policies: [minute, daily]
policies:
  minute: {key: tenant, cost: tokens, rate: 1000, per: 6s, on_missing_key: reject}
  daily: {key: tenant, cost: tokens, rate: 1000000000, per: 24h, plans: {spent: 600}, on_missing_key: reject}
`

// spendAnthropicDay spends key's daily tokens with plain calls until the
// gateway refuses one, which must say that no retry helps.
func spendAnthropicDay(t *testing.T, url, key string) {
	t.Helper()
	body := `{"model":"claude-sonnet-4-5","max_tokens":200,"messages":[{"role":"user","content":"Tell me about rate limits."}]}`
	for range 20 {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if got := resp.Header.Get("X-Should-Retry"); got != "false" || resp.Header.Get("Retry-After") != "" {
				t.Fatalf("a spent day: x-should-retry %q, retry-after %q, want false and none", got, resp.Header.Get("Retry-After"))
			}
			return
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("spending the day: %d", resp.StatusCode)
		}
	}
	t.Fatal("the daily budget was never spent")
}

// anthropicEnforcedConfig is the default config's anthropic route with
// enforce: stream and 300 tokens an hour: less than its 200-token message.
const anthropicEnforcedConfig = `
server:
  listen: 127.0.0.1:0
tenants:
  keys:
    sk-demo-free: {tenant: acme, plan: free}
routes:
  - name: anthropic
    match: {path_prefix: /anthropic/v1/, methods: [POST]}
    strip_prefix: /anthropic
    upstream: builtin:anthropic-mock
    llm: anthropic
    enforce: stream
    stream_window: 16
    policies: [tokens]
policies:
  tokens: {key: tenant, cost: tokens, rate: 200, per: 1h, on_missing_key: reject}
`

// runAnthropicCheck runs check.mjs against baseURL and returns its steps.
func runAnthropicCheck(t *testing.T, node, baseURL string, args ...string) map[string]map[string]any {
	t.Helper()
	return runNodeSteps(t, time.Minute, node, filepath.Join(anthropicSDKDir, "check.mjs"), append([]string{baseURL}, args...)...)
}

// runNodeSteps runs script with node and returns the steps it printed, one
// JSON object a line keyed by its "step", failing t when it fails.
func runNodeSteps(t *testing.T, timeout time.Duration, node, script string, args ...string) map[string]map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(script)
	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var step map[string]any
		if err := json.Unmarshal(sc.Bytes(), &step); err != nil {
			t.Fatalf("%s printed %q: %v", name, sc.Text(), err)
		}
		t.Logf("%s", sc.Text())
		key, _ := step["step"].(string)
		steps[key] = step
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s failed: %v", name, err)
	}
	return steps
}
