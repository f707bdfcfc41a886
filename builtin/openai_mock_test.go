package builtin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// noSleep is an injected sleep that returns at once.
func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func newMock(t *testing.T, cfg OpenAIMockConfig) *httptest.Server {
	t.Helper()
	if cfg.Sleep == nil {
		cfg.Sleep = noSleep
	}
	srv := httptest.NewServer(OpenAIMock(cfg))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, srv *httptest.Server, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
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

// hello is 18 runes: 5 estimated tokens; as the only message, with its
// role (1), 3+3+1+5 = 12.
const hello = `[{"role":"user","content":"Hello there, mock!"}]`

func TestOpenAIMockChatUsage(t *testing.T) {
	long := strings.Repeat("a", 4400) // 1100 tokens; with overheads 1107
	tests := []struct {
		name                       string
		cfg                        OpenAIMockConfig
		body                       string
		wantPrompt, wantCompletion int
		wantCached, wantReasoning  int
		wantFinish                 string
	}{
		{name: "default length", body: `{"model":"m","messages":` + hello + `}`,
			wantPrompt: 12, wantCompletion: 16, wantFinish: "stop"},
		{name: "max_tokens cuts", body: `{"model":"m","messages":` + hello + `,"max_tokens":5}`,
			wantPrompt: 12, wantCompletion: 5, wantFinish: "length"},
		{name: "the larger of two caps bills", body: `{"model":"m","messages":` + hello + `,"max_tokens":10,"max_completion_tokens":3}`,
			wantPrompt: 12, wantCompletion: 10, wantFinish: "length"},
		{name: "limit above the default", body: `{"model":"m","messages":` + hello + `,"max_tokens":100}`,
			wantPrompt: 12, wantCompletion: 16, wantFinish: "stop"},
		{name: "zero limit", body: `{"model":"m","messages":` + hello + `,"max_tokens":0}`,
			wantPrompt: 12, wantCompletion: 0, wantFinish: "length"},
		{name: "configured length", cfg: OpenAIMockConfig{CompletionTokens: 40}, body: `{"model":"m","messages":` + hello + `}`,
			wantPrompt: 12, wantCompletion: 40, wantFinish: "stop"},
		{name: "two messages", body: `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi"}]}`,
			wantPrompt: 3 + (3 + 2 + 4) + (3 + 1 + 1), wantCompletion: 16, wantFinish: "stop"},
		{name: "content parts", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			wantPrompt: 3 + 3 + 1 + 1 + (85 + 8*170), wantCompletion: 16, wantFinish: "stop"}, // an image by URL is billed at its worst size
		{name: "reasoning counts against the limit", cfg: OpenAIMockConfig{ReasoningTokens: 4},
			body:       `{"model":"m","messages":` + hello + `,"max_tokens":10}`,
			wantPrompt: 12, wantCompletion: 10, wantReasoning: 4, wantFinish: "length"},
		{name: "prompt cache", cfg: OpenAIMockConfig{PromptCache: true},
			body:       `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`,
			wantPrompt: 1107, wantCompletion: 16, wantCached: 1024, wantFinish: "stop"},
		{name: "short prompt is not cached", cfg: OpenAIMockConfig{PromptCache: true},
			body:       `{"model":"m","messages":` + hello + `}`,
			wantPrompt: 12, wantCompletion: 16, wantFinish: "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newMock(t, tt.cfg)
			resp, body := do(t, srv, "POST", "/v1/chat/completions", tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d, want 200; body %s", resp.StatusCode, body)
			}
			var got struct {
				Object  string `json:"object"`
				Model   string `json:"model"`
				Choices []struct {
					Message      chatMessage `json:"message"`
					FinishReason string      `json:"finish_reason"`
				} `json:"choices"`
				Usage chatUsage `json:"usage"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("decoding %s: %v", body, err)
			}
			if got.Object != "chat.completion" || got.Model != "m" || len(got.Choices) != 1 {
				t.Fatalf("got object %q model %q %d choices, want chat.completion, m, 1", got.Object, got.Model, len(got.Choices))
			}
			u := got.Usage
			if u.PromptTokens != tt.wantPrompt || u.CompletionTokens != tt.wantCompletion ||
				u.TotalTokens != tt.wantPrompt+tt.wantCompletion ||
				u.PromptTokensDetails.CachedTokens != tt.wantCached ||
				u.CompletionTokensDetails.ReasoningTokens != tt.wantReasoning {
				t.Errorf("usage: got %+v, want prompt %d completion %d total %d cached %d reasoning %d", u,
					tt.wantPrompt, tt.wantCompletion, tt.wantPrompt+tt.wantCompletion, tt.wantCached, tt.wantReasoning)
			}
			ch := got.Choices[0]
			if ch.FinishReason != tt.wantFinish {
				t.Errorf("finish_reason: got %q, want %q", ch.FinishReason, tt.wantFinish)
			}
			if words := len(strings.Fields(ch.Message.Content)); words != tt.wantCompletion-tt.wantReasoning {
				t.Errorf("content has %d words, want %d: %q", words, tt.wantCompletion-tt.wantReasoning, ch.Message.Content)
			}
			if ch.Message.Role != "assistant" {
				t.Errorf("role: got %q, want assistant", ch.Message.Role)
			}
		})
	}
}

func TestOpenAIMockResponsesUsage(t *testing.T) {
	tests := []struct {
		name                       string
		body                       string
		wantInput, wantOutput      int
		wantStatus, wantIncomplete string
	}{
		{name: "string input", body: `{"model":"m","input":"Hello there, mock!"}`,
			wantInput: 12, wantOutput: 16, wantStatus: "completed"},
		{name: "instructions count", body: `{"model":"m","input":"Hello there, mock!","instructions":"Be brief."}`,
			wantInput: 12 + 3 + 3 + 3, wantOutput: 16, wantStatus: "completed"}, // the developer message: its overhead, role and text
		{name: "item input", body: `{"model":"m","input":` + hello + `}`,
			wantInput: 12, wantOutput: 16, wantStatus: "completed"},
		{name: "max_output_tokens cuts", body: `{"model":"m","input":"Hello there, mock!","max_output_tokens":4}`,
			wantInput: 12, wantOutput: 4, wantStatus: "incomplete", wantIncomplete: "max_output_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newMock(t, OpenAIMockConfig{})
			resp, body := do(t, srv, "POST", "/v1/responses", tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d, want 200; body %s", resp.StatusCode, body)
			}
			var got responseObject
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("decoding %s: %v", body, err)
			}
			if got.Object != "response" || got.Status != tt.wantStatus {
				t.Errorf("got object %q status %q, want response, %q", got.Object, got.Status, tt.wantStatus)
			}
			if tt.wantIncomplete != "" && (got.IncompleteDetails == nil || got.IncompleteDetails.Reason != tt.wantIncomplete) {
				t.Errorf("incomplete_details: got %+v, want reason %q", got.IncompleteDetails, tt.wantIncomplete)
			}
			if got.Usage == nil {
				t.Fatalf("no usage in %s", body)
			}
			if u := got.Usage; u.InputTokens != tt.wantInput || u.OutputTokens != tt.wantOutput || u.TotalTokens != tt.wantInput+tt.wantOutput {
				t.Errorf("usage: got %+v, want input %d output %d total %d", u, tt.wantInput, tt.wantOutput, tt.wantInput+tt.wantOutput)
			}
			if len(got.Output) != 1 || len(got.Output[0].Content) != 1 {
				t.Fatalf("output: got %+v, want one message with one part", got.Output)
			}
			if words := len(strings.Fields(got.Output[0].Content[0].Text)); words != tt.wantOutput {
				t.Errorf("text has %d words, want %d", words, tt.wantOutput)
			}
		})
	}
}

func TestOpenAIMockErrors(t *testing.T) {
	srv := newMock(t, OpenAIMockConfig{})
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantParam, wantCode      any // nil for JSON null
	}{
		{"invalid json", "POST", "/v1/chat/completions", `{"model":`, 400, nil, nil},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":` + hello + `}`, 400, "model", "missing_required_parameter"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "messages", "missing_required_parameter"},
		{"empty messages", "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages", "missing_required_parameter"},
		{"messages not an array", "POST", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, 400, "messages", nil},
		{"message without role", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"content":"hi"}]}`, 400, "messages[0].role", "missing_required_parameter"},
		{"content of a wrong type", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", nil},
		{"negative max_tokens", "POST", "/v1/chat/completions", `{"model":"m","messages":` + hello + `,"max_tokens":-1}`, 400, "max_tokens", nil},
		{"responses invalid json", "POST", "/v1/responses", `nope`, 400, nil, nil},
		{"responses missing model", "POST", "/v1/responses", `{"input":"hi"}`, 400, "model", "missing_required_parameter"},
		{"responses missing input", "POST", "/v1/responses", `{"model":"m"}`, 400, "input", "missing_required_parameter"},
		{"responses empty input", "POST", "/v1/responses", `{"model":"m","input":""}`, 400, "input", "missing_required_parameter"},
		{"responses input of a wrong type", "POST", "/v1/responses", `{"model":"m","input":{}}`, 400, "input", nil},
		{"responses negative limit", "POST", "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":-3}`, 400, "max_output_tokens", nil},
		{"unknown path", "POST", "/v1/completions/nope", `{}`, 404, nil, "unknown_url"},
		{"without the v1 prefix", "POST", "/chat/completions", `{}`, 404, nil, "unknown_url"},
		{"GET on chat", "GET", "/v1/chat/completions", ``, 405, nil, "method_not_allowed"},
		{"POST on models", "POST", "/v1/models", `{}`, 405, nil, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, srv, tt.method, tt.path, tt.body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status: got %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type: got %q, want application/json", ct)
			}
			var got struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("decoding %s: %v", body, err)
			}
			e := got.Error
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := e[k]; !ok {
					t.Errorf("error has no %q: %s", k, body)
				}
			}
			if msg, _ := e["message"].(string); msg == "" {
				t.Errorf("error message empty: %s", body)
			}
			if e["type"] != "invalid_request_error" {
				t.Errorf("type: got %v, want invalid_request_error", e["type"])
			}
			if e["param"] != tt.wantParam || e["code"] != tt.wantCode {
				t.Errorf("param, code: got %v, %v, want %v, %v", e["param"], e["code"], tt.wantParam, tt.wantCode)
			}
			if tt.wantStatus == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
}

func TestOpenAIMockBodyTooLarge(t *testing.T) {
	srv := newMock(t, OpenAIMockConfig{})
	resp, body := do(t, srv, "POST", "/v1/chat/completions", strings.Repeat(" ", MaxOpenAIMockBody+1))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status: got %d, want 413; body %s", resp.StatusCode, body)
	}
}

func TestOpenAIMockModels(t *testing.T) {
	srv := newMock(t, OpenAIMockConfig{})
	resp, body := do(t, srv, "GET", "/v1/models", "")
	var got struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("got %d %s (%v), want 200 and a model list", resp.StatusCode, body, err)
	}
	if got.Object != "list" || len(got.Data) != 1 || got.Data[0].ID == "" {
		t.Errorf("got %+v, want a list of one model", got)
	}
}

// recordSleep records the waits it is asked for and returns at once.
type recordSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *recordSleep) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
	return ctx.Err()
}

func (r *recordSleep) got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.waits)
}

func TestOpenAIMockLatency(t *testing.T) {
	const first, tps = 2 * time.Second, 10 // 100ms a token
	tests := []struct {
		name, path, body string
		want             []time.Duration
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","messages":` + hello + `,"max_tokens":5}`,
			[]time.Duration{first + 500*time.Millisecond}},
		{"chat stream", "/v1/chat/completions", `{"model":"m","messages":` + hello + `,"max_tokens":3,"stream":true}`,
			[]time.Duration{first, 100 * time.Millisecond, 100 * time.Millisecond}},
		{"responses", "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":2}`,
			[]time.Duration{first + 200*time.Millisecond}},
		{"responses stream", "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":2,"stream":true}`,
			[]time.Duration{first, 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordSleep{}
			srv := newMock(t, OpenAIMockConfig{FirstByteLatency: first, TokensPerSecond: tps, Sleep: rec.sleep})
			if resp, body := do(t, srv, "POST", tt.path, tt.body); resp.StatusCode != 200 {
				t.Fatalf("status: got %d, want 200; body %s", resp.StatusCode, body)
			}
			if got := rec.got(); !slices.Equal(got, tt.want) {
				t.Errorf("waits: got %v, want %v", got, tt.want)
			}
		})
	}
}
