package builtin

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// MaxOpenAIMockBody is the largest request body OpenAIMock accepts; a larger
// one gets 413, so a huge prompt cannot make the mock buffer it.
const MaxOpenAIMockBody = 4 << 20

// DefaultMockCompletionTokens is the completion length OpenAIMock uses when
// OpenAIMockConfig.CompletionTokens is zero.
const DefaultMockCompletionTokens = 16

// OpenAIMockConfig configures OpenAIMock. The zero value answers at once with
// DefaultMockCompletionTokens tokens per completion.
type OpenAIMockConfig struct {
	// CompletionTokens is how many tokens a completion has when the request
	// sets a larger limit or none (max_tokens, max_completion_tokens,
	// max_output_tokens). Zero means DefaultMockCompletionTokens.
	CompletionTokens int
	// ReasoningTokens is how many of a completion's tokens are reported as
	// reasoning (completion_tokens_details.reasoning_tokens). They count
	// against the request's limit, as OpenAI's do, and produce no text.
	// Zero reports none.
	ReasoningTokens int
	// PromptCache, when true, reports a prompt of 1024 tokens or more as
	// cached up to its longest multiple of 128 tokens (OpenAI's prompt
	// caching granularity), as if the same prefix had been sent before.
	// False reports no cached tokens.
	PromptCache bool
	// FirstByteLatency is how long the mock waits before it answers. Zero
	// means no wait.
	FirstByteLatency time.Duration
	// TokensPerSecond paces the completion: a stream waits 1/TokensPerSecond
	// between two content events, a non-streamed answer waits as long as the
	// whole completion would take. Zero (or less) means as fast as possible.
	TokensPerSecond float64
	// Sleep waits d, returning early with ctx's error when ctx ends first.
	// Nil uses a timer. Tests inject it so that they do not wait for real and
	// can hold a stream between two events.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now stamps the created fields. Nil means time.Now.
	Now func() time.Time
	// CountTokens counts a text's tokens for model. Nil estimates a token
	// per four characters; pass a tokenizer to bill text as the provider
	// does.
	CountTokens func(model, text string) int
}

// OpenAIMock returns a handler that answers like an OpenAI-compatible API, so
// the gateway's LLM routes can be tried and tested without a provider:
//
//   - POST /v1/chat/completions and POST /v1/responses answer with a
//     deterministic filler completion and its usage, or stream it as
//     server-sent events when the request has "stream": true;
//   - GET /v1/models lists one model;
//   - anything else is an OpenAI-shaped 404 (unknown path) or 405 (known
//     path, other method); bad requests get an OpenAI-shaped 400.
//
// It bills like the providers: an image, audio or file part by their
// published formulas (see imageTokens, audioTokens, fileTokens), reasoning
// tokens before the first visible token (a stream is silent while the
// model thinks), generation to its natural end (CompletionTokens) when the
// request sets no cap, and n choices. What it billed is counted when it
// accepts a request, for the whole completion, and read with Billed. Text
// is counted by CountTokens. It is safe for concurrent use.
func OpenAIMock(cfg OpenAIMockConfig) *OpenAIMockServer {
	if cfg.CompletionTokens <= 0 {
		cfg.CompletionTokens = DefaultMockCompletionTokens
	}
	if cfg.ReasoningTokens < 0 {
		cfg.ReasoningTokens = 0
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CountTokens == nil {
		cfg.CountTokens = func(_, s string) int { return estimateTokens(s) }
	}
	return &OpenAIMockServer{cfg: cfg}
}

// OpenAIMockServer is the handler OpenAIMock returns.
type OpenAIMockServer struct {
	cfg    OpenAIMockConfig
	ids    atomic.Uint64 // numbers the response ids
	billed ledger
}

// Billed returns what the mock has billed so far.
func (m *OpenAIMockServer) Billed() MockBill { return m.billed.read() }

type openAIMock = OpenAIMockServer

func (m *openAIMock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var serve func(http.ResponseWriter, *http.Request, []byte)
	method := http.MethodPost
	switch r.URL.Path {
	case "/v1/chat/completions":
		serve = m.chat
	case "/v1/responses":
		serve = m.responses
	case "/v1/images/generations":
		serve = m.images
	case "/v1/images/edits", "/v1/images/variations":
		serve = m.imageUploads
	case "/v1/audio/speech":
		serve = m.speech
	case "/v1/audio/transcriptions", "/v1/audio/translations":
		serve = m.transcriptions
	case "/v1/embeddings":
		serve = m.embeddings
	case "/v1/moderations":
		serve = m.moderations
	case "/v1/models":
		method = http.MethodGet
		serve = func(w http.ResponseWriter, _ *http.Request, _ []byte) { m.models(w) }
	default:
		writeOpenAIError(w, http.StatusNotFound, apiError{
			Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path),
			Type:    "invalid_request_error", Code: "unknown_url",
		})
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeOpenAIError(w, http.StatusMethodNotAllowed, apiError{
			Message: fmt.Sprintf("Method %s not allowed for %s; use %s", r.Method, r.URL.Path, method),
			Type:    "invalid_request_error", Code: "method_not_allowed",
		})
		return
	}
	var body []byte
	if method == http.MethodPost {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, MaxOpenAIMockBody+1)); err != nil {
			writeOpenAIError(w, http.StatusBadRequest, invalid("reading request body: "+err.Error(), ""))
			return
		}
		if len(body) > MaxOpenAIMockBody {
			writeOpenAIError(w, http.StatusRequestEntityTooLarge,
				invalid(fmt.Sprintf("request body exceeds %d bytes", MaxOpenAIMockBody), ""))
			return
		}
	}
	if acceptsGzip(r) {
		g := &gzipWriter{ResponseWriter: w, gz: gzip.NewWriter(w)}
		defer g.close()
		w = g
	}
	serve(w, r, body)
}

// apiError is the inside of OpenAI's error document {"error": {...}}. Param
// and Code are null when empty, as OpenAI sends them.
type apiError struct {
	Message, Type, Param, Code string
}

func (e apiError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}{e.Message, e.Type, nullable(e.Param), nullable(e.Code)})
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func invalid(msg, param string) apiError {
	return apiError{Message: msg, Type: "invalid_request_error", Param: param}
}

func writeOpenAIError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, map[string]apiError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	out, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(out, '\n'))
}

// decodeRequest unmarshals body into v; a failure is described as OpenAI
// does, naming the field whose type is wrong.
func decodeRequest(body []byte, v any) (apiError, bool) {
	err := json.Unmarshal(body, v)
	if err == nil {
		return apiError{}, true
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return invalid(fmt.Sprintf("Invalid type for '%s': expected %s, got JSON %s", te.Field, te.Type, te.Value), te.Field), false
	}
	return invalid("We could not parse the JSON body of your request: "+err.Error(), ""), false
}

// completion is what the mock answers with, before it is shaped for an API.
type completion struct {
	words     []string // the visible text, one word per token
	reasoning int      // reasoning tokens, counted but not shown
	prompt    int
	cached    int
	rejected  int    // prediction tokens billed as output, on top of the cap
	finish    string // "stop", or "length" when the request's limit cut it
	choices   int    // each choice is this completion again
}

func (c completion) tokens() int  { return len(c.words) + c.reasoning + c.rejected }
func (c completion) text() string { return strings.Join(c.words, " ") }

// complete sizes a completion: the configured length, cut at the request's
// limit (nil: none), reasoning tokens first since they count against it;
// n choices of it. It is billed here, whole.
func (m *openAIMock) complete(prompt int, limit *int, n int) completion {
	return m.completeWith(prompt, limit, n, 0)
}

// completeWith is complete with rejected prediction tokens billed as
// output on top of the limit.
func (m *openAIMock) completeWith(prompt int, limit *int, n, rejected int) completion {
	c := m.size(prompt, limit)
	c.rejected = rejected
	c.choices = max(n, 1)
	m.billed.bill(c)
	return c
}

func (m *openAIMock) size(prompt int, limit *int) completion {
	c := completion{prompt: prompt, finish: "stop", reasoning: m.cfg.ReasoningTokens}
	n := m.cfg.CompletionTokens
	if limit != nil {
		c.reasoning = min(c.reasoning, *limit)
		if room := *limit - c.reasoning; room <= n {
			n, c.finish = room, "length"
		}
	}
	c.words = fillerWords(n)
	if m.cfg.PromptCache && prompt >= 1024 {
		c.cached = prompt - prompt%128
	}
	return c
}

// checkLimit rejects a negative token limit; zero is allowed and yields an
// empty completion cut for length.
func checkLimit(param string, v *int) (apiError, bool) {
	if v != nil && *v < 0 {
		return invalid(fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 0, but got %d instead.", param, *v), param), false
	}
	return apiError{}, true
}

// firstLimit is the first of the request's limits that is set.
func firstLimit(limits ...*int) *int {
	for _, l := range limits {
		if l != nil {
			return l
		}
	}
	return nil
}

// largerLimit is the larger of two limits, either of which may be unset.
func largerLimit(a, b *int) *int {
	if a == nil || (b != nil && *b > *a) {
		return b
	}
	return a
}

// estimateTokens approximates a tokenizer without one: a token per started
// run of four characters (runes), OpenAI's rule of thumb for English. It is
// deterministic, which is all the mock needs.
func estimateTokens(s string) int { return (utf8.RuneCountInString(s) + 3) / 4 }

// Per-message and per-reply overheads, as OpenAI counts them for chat models.
const (
	tokensPerMessage = 3
	tokensPerReply   = 3
)

// contentTokens bills a message's content: a string, or an array of parts
// (text by count, images, audio and files by their formulas).
func contentTokens(model string, raw json.RawMessage, count func(string) int) (int, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return count(s), true
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return 0, false
	}
	n := 0
	for _, p := range parts {
		n += partTokens(model, p, count)
	}
	return n, true
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// promptTokens counts messages: each message's content, its overhead, and
// the reply's priming.
func (m *openAIMock) promptTokens(model string, msgs []message, param string) (int, apiError, bool) {
	count := func(s string) int { return m.cfg.CountTokens(model, s) }
	n := tokensPerReply
	for i, msg := range msgs {
		content, ok := contentTokens(model, msg.Content, count)
		if !ok {
			p := fmt.Sprintf("%s[%d].content", param, i)
			return 0, invalid(fmt.Sprintf("Invalid type for '%s': expected a string or an array of content parts", p), p), false
		}
		n += tokensPerMessage + count(msg.Role) + content
	}
	return n, apiError{}, true
}

// filler is the mock's vocabulary; a completion of n tokens is its first n
// words, cycling. Each word is one token in OpenAI's vocabularies, alone
// and after a space, so a completion's text counts what its usage bills,
// as a provider's does.
var filler = strings.Fields(`the rate limit holds every token for each tenant and model so that no one
	call can use more than its share of a day or month when many clients send at once while all others wait`)

func fillerWords(n int) []string {
	words := make([]string, n)
	for i := range words {
		words[i] = filler[i%len(filler)]
	}
	return words
}

// wait is the completion's latency for a non-streamed answer: the first
// byte's, then as long as streaming all its tokens would take.
func (m *openAIMock) wait(ctx context.Context, tokens int) error {
	d := m.cfg.FirstByteLatency + time.Duration(tokens)*m.tokenInterval()
	if d <= 0 {
		return nil
	}
	return m.cfg.Sleep(ctx, d)
}

// tokenInterval is the pause between two streamed tokens; zero when unpaced.
func (m *openAIMock) tokenInterval() time.Duration {
	if m.cfg.TokensPerSecond <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / m.cfg.TokensPerSecond)
}

func (m *openAIMock) newID(prefix string) string {
	return fmt.Sprintf("%s-mock-%d", prefix, m.ids.Add(1))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// models lists one model; the mock accepts any model name in requests.
func (m *openAIMock) models(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []model{{ID: "gpt-mock", Object: "model", Created: 0, OwnedBy: "builtin:openai-mock"}},
	})
}
