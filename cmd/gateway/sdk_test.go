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

// sdkCheckDir holds the official OpenAI SDK (pinned in package.json) and
// check.mjs; make test installs it (npm ci) before the tests run.
const sdkCheckDir = "testdata/openai-sdk"

// An unmodified OpenAI SDK pointed at the default config's /v1 works: a
// plain call, a stream with usage, its RateLimitError once the free plan's
// tokens run out, and its own retry after the gateway's retry-after-ms.
func TestOpenAISDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: the OpenAI SDK check needs Node.js (make test installs it as root, or: apt-get install -y nodejs npm)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm not found on PATH: make test installs the SDK with npm ci")
	}
	if ok, _ := filepath.Glob(filepath.Join(sdkCheckDir, "node_modules", "openai", "package.json")); len(ok) == 0 {
		t.Fatalf("the OpenAI SDK is not installed: run 'npm ci --prefix cmd/gateway/%s' (make test does)", sdkCheckDir)
	}
	path := copyDefaultConfig(t)
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	g := startGateway(t, "gateway", path)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(sdkCheckDir, "check.mjs"), g.base+"/v1")
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
	if num("plain", "total_tokens") <= 0 || num("plain", "content") <= 0 {
		t.Fatalf("plain call: got %v, want a completion with usage", steps["plain"])
	}
	if num("stream", "chunks") < 3 || num("stream", "total_tokens") <= 0 {
		t.Fatalf("stream: got %v, want chunks and the usage chunk", steps["stream"])
	}
	rl := steps["rate_limited"]
	if rl["is_rate_limit_error"] != true || num("rate_limited", "status") != 429 || rl["code"] != "rate_limit_exceeded" || num("rate_limited", "retry_after_ms") <= 0 {
		t.Fatalf("out of tokens: got %v, want the SDK's RateLimitError (429, rate_limit_exceeded, retry-after-ms)", rl)
	}
	if num("retried", "total_tokens") <= 0 || num("retried", "waited_ms") < 100 {
		t.Fatalf("retry: got %v, want the SDK to wait as told and then succeed", steps["retried"])
	}
}

// testWriter sends a child's stderr to the test log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("check.mjs: %s", p)
	return len(p), nil
}
