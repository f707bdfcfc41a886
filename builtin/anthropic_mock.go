package builtin

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// AnthropicMockConfig configures AnthropicMock. The zero value answers at
// once with DefaultMockCompletionTokens tokens per message.
type AnthropicMockConfig struct {
	// CompletionTokens is how many tokens a message has when max_tokens
	// allows; zero means DefaultMockCompletionTokens.
	CompletionTokens int
	// CacheReadTokens and CacheCreationTokens, when set, are reported as
	// cache_read_input_tokens and cache_creation_input_tokens, taken out of
	// the prompt's input_tokens as Anthropic reports a cached prefix.
	CacheReadTokens, CacheCreationTokens int
	// TokensPerSecond paces a stream's deltas; zero or less: at once.
	TokensPerSecond float64
	// Sleep waits d or until ctx ends; nil uses a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// AnthropicMock is a stand-in for Anthropic's Messages API: POST
// /v1/messages answers a filler message as JSON, or as Anthropic's event
// stream when the request has "stream": true (message_start,
// content_block_start, ping, content_block_delta…, content_block_stop,
// message_delta with the cumulative output_tokens, message_stop). It wants
// a key (x-api-key, or Authorization: Bearer, which newer SDKs send) and
// anthropic-version, as the API does, and answers errors in
// Anthropic's shape. Input tokens are estimated as a token per four bytes
// of the body, and what it does not read as its prompt at a token a byte
// (see anthropicInputTokens). It counts the output tokens it sent
// (Billed), and the calls it accepted with their input and output (Bill).
// It is safe for concurrent use.
type AnthropicMock struct {
	cfg    AnthropicMockConfig
	ids    atomic.Uint64
	billed atomic.Int64
	calls  atomic.Int64
	input  atomic.Int64
}

// NewAnthropicMock returns an AnthropicMock for cfg.
func NewAnthropicMock(cfg AnthropicMockConfig) *AnthropicMock {
	if cfg.CompletionTokens <= 0 {
		cfg.CompletionTokens = DefaultMockCompletionTokens
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	return &AnthropicMock{cfg: cfg}
}

// Billed returns the output tokens the mock has sent (a stream cut short
// counts what it wrote before the cut).
func (m *AnthropicMock) Billed() int64 { return m.billed.Load() }

// Bill returns what the mock has billed: the calls it accepted, their
// input (cached parts included) and the output tokens it sent.
func (m *AnthropicMock) Bill() MockBill {
	return MockBill{Calls: m.calls.Load(), Input: m.input.Load(), Output: m.billed.Load()}
}

type anthropicRequest struct {
	Model     string            `json:"model"`
	MaxTokens *int              `json:"max_tokens"`
	Messages  []json.RawMessage `json:"messages"`
	Stream    bool              `json:"stream"`
}

func (m *AnthropicMock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if acceptsGzip(r) { // as Anthropic answers a client that accepts it
		g := &gzipWriter{ResponseWriter: w, gz: gzip.NewWriter(w)}
		defer g.close()
		w = g
	}
	countTokens := r.URL.Path == "/v1/messages/count_tokens"
	if r.URL.Path != "/v1/messages" && !countTokens {
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", "Not Found")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeAnthropicError(w, http.StatusMethodNotAllowed, "invalid_request_error", "Method Not Allowed")
		return
	}
	if r.Header.Get("X-Api-Key") == "" && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
		return
	}
	if r.Header.Get("Anthropic-Version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxOpenAIMockBody+1))
	if err != nil || len(body) > MaxOpenAIMockBody {
		writeAnthropicError(w, http.StatusRequestEntityTooLarge, "request_too_large", "request body too large or unreadable")
		return
	}
	if countTokens {
		// Free, as Anthropic's: it bills nothing and says the input's size.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"input_tokens":%d}`+"\n", (len(body)+3)/4)
		return
	}
	var req anthropicRequest
	switch err := json.Unmarshal(body, &req); {
	case err != nil:
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	case req.Model == "":
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "model: Field required")
		return
	case req.MaxTokens == nil || *req.MaxTokens < 1:
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required (an integer >= 1)")
		return
	case len(req.Messages) == 0:
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "messages: at least one message is required")
		return
	}
	n, stop := m.cfg.CompletionTokens, "end_turn"
	if *req.MaxTokens < n {
		n, stop = *req.MaxTokens, "max_tokens"
	}
	prompt := anthropicInputTokens(body)
	m.calls.Add(1)
	m.input.Add(int64(prompt))
	usage := m.inputUsage(prompt)
	id := fmt.Sprintf("msg_mock_%d", m.ids.Add(1))
	words := fillerWords(n)
	if !req.Stream {
		m.billed.Add(int64(n))
		usage["output_tokens"] = n
		writeAnthropicJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]string{"type": "text", "text": strings.Join(words, " ")}},
			"stop_reason": stop, "stop_sequence": nil, "usage": usage,
		})
		return
	}
	m.stream(w, r, id, req.Model, words, stop, usage)
}

// inputUsage is the input side of the usage: the prompt, the cached part
// reported apart.
func (m *AnthropicMock) inputUsage(prompt int) map[string]any {
	read := min(m.cfg.CacheReadTokens, prompt)
	created := min(m.cfg.CacheCreationTokens, prompt-read)
	return map[string]any{
		"input_tokens":                prompt - read - created,
		"cache_read_input_tokens":     read,
		"cache_creation_input_tokens": created,
	}
}

func (m *AnthropicMock) stream(w http.ResponseWriter, r *http.Request, id, model string, words []string, stop string, usage map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(name string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil || r.Context().Err() != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	usage["output_tokens"] = 1
	m.billed.Add(1) // message_start's output count: the first token is generated
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage,
	}}) {
		return
	}
	if !send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]string{"type": "text", "text": ""}}) ||
		!send("ping", map[string]string{"type": "ping"}) {
		return
	}
	var interval time.Duration
	if m.cfg.TokensPerSecond > 0 {
		interval = time.Duration(float64(time.Second) / m.cfg.TokensPerSecond)
	}
	for i, word := range words {
		if i > 0 {
			if interval > 0 && m.cfg.Sleep(r.Context(), interval) != nil {
				return
			}
			m.billed.Add(1)
			word = " " + word
		}
		if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]string{"type": "text_delta", "text": word}}) {
			return
		}
	}
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": len(words)}})
	send("message_stop", map[string]string{"type": "message_stop"})
}

func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	writeAnthropicJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

func writeAnthropicJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
