package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

func copyDefaultConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeDefaultConfig runs the README's first command in-process: the
// default config in front of the built-in echo upstream, then a live edit,
// a SIGHUP and a drain.
func TestServeDefaultConfig(t *testing.T) {
	path := copyDefaultConfig(t)
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	g := startGateway(t, "gateway", path)
	base := g.base

	var codes []int
	for range 30 {
		res, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		codes = append(codes, res.StatusCode)
		if res.StatusCode == http.StatusTooManyRequests {
			var e struct {
				Code   int    `json:"code"`
				Policy string `json:"policy"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Code != 42900 || e.Policy != "per-ip" {
				t.Fatalf("429 body %s: want code 42900 for policy per-ip", body)
			}
			if res.Header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		}
	}
	for i, c := range codes {
		want := http.StatusOK
		if i >= 10 {
			want = http.StatusTooManyRequests
		}
		if c != want {
			t.Fatalf("request %d: got %d, want %d (all: %v)", i+1, c, want, codes)
		}
	}

	// A live edit that breaks the file keeps the old config...
	good, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append(good, []byte("\nbogus: 1\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, 0, regexp.MustCompile(`config reload failed.*bogus`))
	if res, err := http.Get(base + "/"); err != nil || res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after a bad edit got %v %v, want the old limits (429)", res.StatusCode, err)
	}
	// ...and a good one applies: a new limit for per-ip starts fresh buckets.
	edited := strings.Replace(string(good), "rate: 10\n", "rate: 20\n", 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, 0, regexp.MustCompile(`config reloaded`))
	res, err := http.Get(base + "/")
	if err != nil || res.StatusCode != http.StatusOK || res.Header.Get("RateLimit-Policy") != `"per-ip";q=10;w=60` {
		t.Fatalf("after a good edit got %v %q %v, want 200 with the new limit", res.StatusCode, res.Header.Get("RateLimit-Policy"), err)
	}

	// SIGHUP reloads too: content unchanged, so the watcher says so.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, 0, regexp.MustCompile(`SIGHUP: reloading config`))
}

func TestCheckCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-config", "../../gateway.yaml"}, &out, &errOut); code != 0 {
		t.Fatalf("check gateway.yaml exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"ok (5 routes, 5 policies)", "per-ip", "10/1m burst 10", "builtin:echo", "route payments: idempotency on POST,PATCH: Idempotency-Key (required)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("routes:\n  - name: a\n    upstream: ftp://x\n    policies: [nope]\npolicies:\n  p: {rate: -1, per: 1m}\n"), 0o644)
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"check", "-config", bad}, &out, &errOut); code == 0 {
		t.Fatal("check of a bad config exited 0")
	}
	for _, want := range []string{"bad.yaml: routes[0].upstream", "bad.yaml: routes[0].policies[0]", "bad.yaml: policies.p.rate"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("check errors lack %q:\n%s", want, errOut.String())
		}
	}

	// The config model does not know which built-in upstreams the binary
	// ships; check does, and names them.
	os.WriteFile(bad, []byte("routes: [{name: r, upstream: 'builtin:nope'}]\n"), 0o644)
	errOut.Reset()
	if code := run(context.Background(), []string{"check", "-config", bad}, io.Discard, &errOut); code == 0 {
		t.Fatal("check of an unknown builtin upstream exited 0")
	}
	if want := `bad.yaml: routes[0].upstream: unknown builtin upstream "nope" (known: anthropic-mock, echo, openai-mock)`; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", errOut.String(), want)
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "gateway ") {
		t.Fatalf("version: exit %d, output %q", code, out.String())
	}
	if code := run(context.Background(), []string{"frobnicate"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("unknown command exited %d, want 2", code)
	}
}

// check says when a route keeps idempotent responses for known API keys only.
func TestCheckShowsRequireAPIKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := "routes:\n  - {name: pay, upstream: \"http://127.0.0.1:9\", idempotency: {required: true, require_api_key: true}}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-config", path}, &out, &errOut); code != 0 {
		t.Fatalf("check exited %d: %s", code, errOut.String())
	}
	if want := "route pay: idempotency on POST,PATCH: Idempotency-Key (required, with a known API key)"; !strings.Contains(out.String(), want) {
		t.Errorf("check output lacks %q:\n%s", want, out.String())
	}
}
