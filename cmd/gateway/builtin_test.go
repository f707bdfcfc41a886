package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

const builtinsConfig = `
server:
  listen: 127.0.0.1:0
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: builtin:openai-mock
  - name: echo
    match: {path_prefix: /}
    upstream: builtin:echo
`

// TestServeBuiltinOpenAIMock serves both builtins side by side and goes
// through the gateway to builtin:openai-mock, plain and streamed.
func TestServeBuiltinOpenAIMock(t *testing.T) {
	g := startGateway(t, "gateway", writePressureConfig(t, builtinsConfig))
	c := newTestClient(t)
	post := func(body string) (*http.Response, []byte) {
		t.Helper()
		resp, err := c.Post(g.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, out
	}

	resp, body := post(`{"model":"m","messages":[{"role":"user","content":"Hello there, mock!"}],"max_tokens":5}`)
	var got struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("got %d %s (%v), want 200 and a chat completion", resp.StatusCode, body, err)
	}
	if u := got.Usage; u.PromptTokens != 12 || u.CompletionTokens != 5 || u.TotalTokens != 17 { // 3 + 3 + role 1 + text 5
		t.Errorf("usage: got %+v, want prompt 12 completion 5 total 17", u)
	}

	resp, body = post(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: got %d %q, want 200 text/event-stream", resp.StatusCode, ct)
	}
	events := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	if n := len(events); n < 3 || events[n-1] != "data: [DONE]" || !strings.Contains(events[n-2], `"usage":{"prompt_tokens"`) {
		t.Errorf("stream: got %d events ending %q, want the usage chunk then [DONE]", n, events[max(0, n-2):])
	}

	if r := mustSend(t, c, "GET", g.base+"/hello"); r.status != 200 || !strings.Contains(string(r.body), `"path": "/hello"`) {
		t.Errorf("echo beside the mock: got %d %s, want 200 and the echoed request", r.status, r.body)
	}
}
