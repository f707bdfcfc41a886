package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// anthropicSDKDir holds Anthropic's official SDK (pinned in package.json)
// and check.mjs; make test installs it (npm ci) before the tests run.
const anthropicSDKDir = "testdata/anthropic-sdk"

// An unmodified @anthropic-ai/sdk pointed at the default config's anthropic
// route works: a plain call, a stream with usage, and its own
// RateLimitError (rate_limit_error, retry-after, anthropic-ratelimit-*)
// once the free plan's tokens run out.
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

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(anthropicSDKDir, "check.mjs"), g.base+"/anthropic")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var step map[string]any
		if err := json.Unmarshal(sc.Bytes(), &step); err != nil {
			t.Fatalf("check.mjs printed %q: %v", sc.Text(), err)
		}
		t.Logf("%s", sc.Text())
		steps[step["step"].(string)] = step
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("check.mjs failed: %v", err)
	}
	num := func(step, field string) float64 { v, _ := steps[step][field].(float64); return v }
	if num("plain", "input_tokens") <= 0 || num("plain", "output_tokens") <= 0 || num("plain", "text") <= 0 {
		t.Fatalf("plain call: got %v, want a message with usage", steps["plain"])
	}
	if num("stream", "events") < 5 || num("stream", "output_tokens") <= 0 || num("stream", "input_tokens") <= 0 {
		t.Fatalf("stream: got %v, want events and the usage", steps["stream"])
	}
	rl := steps["rate_limited"]
	if rl["is_rate_limit_error"] != true || num("rate_limited", "status") != 429 || rl["type"] != "rate_limit_error" ||
		num("rate_limited", "retry_after") < 1 || rl["tokens_remaining"] != "0" {
		t.Fatalf("out of tokens: got %v, want the SDK's RateLimitError (429, rate_limit_error, retry-after, anthropic-ratelimit-tokens-remaining 0)", rl)
	}
}
