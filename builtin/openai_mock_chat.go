package builtin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

type chatRequest struct {
	Model               string    `json:"model"`
	Messages            []message `json:"messages"`
	MaxTokens           *int      `json:"max_tokens"`
	MaxCompletionTokens *int      `json:"max_completion_tokens"`
	N                   *int      `json:"n"`
	Stream              bool      `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (c completion) chatUsage() *chatUsage {
	out := max(c.choices, 1) * c.tokens()
	u := &chatUsage{PromptTokens: c.prompt, CompletionTokens: out, TotalTokens: c.prompt + out}
	u.PromptTokensDetails.CachedTokens = c.cached
	u.CompletionTokensDetails.ReasoningTokens = max(c.choices, 1) * c.reasoning
	return u
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	Message      *chatMessage `json:"message,omitempty"`
	Delta        *chatDelta   `json:"delta,omitempty"`
	Logprobs     *struct{}    `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	Refusal          *string         `json:"refusal,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	FunctionCall     *chatCall       `json:"function_call,omitempty"`
	ToolCalls        []chatToolDelta `json:"tool_calls,omitempty"`
	Audio            *chatAudio      `json:"audio,omitempty"`
}

type chatCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Input     string `json:"input,omitempty"`
}

type chatToolDelta struct {
	Index  int       `json:"index"`
	Type   string    `json:"type,omitempty"`
	Custom *chatCall `json:"custom,omitempty"`
}

type chatAudio struct {
	ID         string `json:"id,omitempty"`
	Data       string `json:"data,omitempty"`
	Transcript string `json:"transcript,omitempty"`
}

// MockDeltaHeader names, on a request to OpenAIMock, the kind of delta its
// stream carries the completion in: "refusal", "reasoning_content",
// "function_call" (the legacy call's arguments), "custom" (a custom tool's
// input), "audio" (a transcript and 100 bytes of audio a token); content
// otherwise. Tests use it to make every kind of output a provider bills.
const MockDeltaHeader = "X-Mock-Delta"

// mockAudio is 100 bytes of audio, base64: what the mock streams for each
// token of an audio answer.
var mockAudio = strings.Repeat("AAAA", 100/3+1)

// deltaOf is the chat delta carrying word as the delta kind names.
func deltaOf(kind, word string) *chatDelta {
	switch kind {
	case "refusal":
		return &chatDelta{Refusal: &word}
	case "reasoning_content":
		return &chatDelta{ReasoningContent: &word}
	case "function_call":
		return &chatDelta{FunctionCall: &chatCall{Arguments: word}}
	case "custom":
		return &chatDelta{ToolCalls: []chatToolDelta{{Index: 0, Custom: &chatCall{Input: word}}}}
	case "audio":
		return &chatDelta{Audio: &chatAudio{Data: mockAudio, Transcript: word}}
	}
	return &chatDelta{Content: &word}
}

// chatResponse is both a chat.completion and a chat.completion.chunk.
type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	// Usage is the completion's; a stream that asked for usage sends null on
	// every chunk but the last, as OpenAI does.
	Usage *chatUsage `json:"usage,omitempty"`
	// nullUsage makes a chunk carry "usage": null.
	nullUsage bool
}

func (r chatResponse) MarshalJSON() ([]byte, error) {
	type plain chatResponse
	if r.Usage == nil && r.nullUsage {
		return json.Marshal(struct {
			plain
			Usage *chatUsage `json:"usage"`
		}{plain: plain(r)})
	}
	return json.Marshal(plain(r))
}

// chat answers POST /v1/chat/completions.
func (m *openAIMock) chat(w http.ResponseWriter, r *http.Request, body []byte) {
	var req chatRequest
	if e, ok := decodeRequest(body, &req); !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	if e, ok := validateChat(&req); !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	prompt, e, ok := m.promptTokens(req.Model, req.Messages, "messages")
	if !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	// Both caps set: a provider may read either, so the mock bills as
	// the one that reads the larger would.
	prompt += m.hiddenTokens(req.Model, body, chatRead, "messages")
	c := m.completeWith(prompt, largerLimit(req.MaxCompletionTokens, req.MaxTokens), n, m.predictionTokens(req.Model, body))
	resp := chatResponse{ID: m.newID("chatcmpl"), Created: m.cfg.Now().Unix(), Model: req.Model}
	if req.Stream {
		m.streamChat(w, r, resp, c, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, r.Header.Get(MockDeltaHeader))
		return
	}
	if err := m.wait(r.Context(), c.tokens()); err != nil {
		return // the client has gone
	}
	resp.Object = "chat.completion"
	resp.Choices = make([]chatChoice, c.choices)
	for i := range resp.Choices {
		resp.Choices[i] = chatChoice{Index: i, Message: &chatMessage{Role: "assistant", Content: c.text()}, FinishReason: &c.finish}
	}
	resp.Usage = c.chatUsage()
	writeJSON(w, http.StatusOK, resp)
}

func validateChat(req *chatRequest) (apiError, bool) {
	if req.Model == "" {
		return apiError{Message: "you must provide a model parameter", Type: "invalid_request_error",
			Param: "model", Code: "missing_required_parameter"}, false
	}
	if len(req.Messages) == 0 {
		return apiError{Message: "Missing required parameter: 'messages'.", Type: "invalid_request_error",
			Param: "messages", Code: "missing_required_parameter"}, false
	}
	for i, msg := range req.Messages {
		if msg.Role == "" {
			p := fmt.Sprintf("messages[%d].role", i)
			return apiError{Message: fmt.Sprintf("Missing required parameter: '%s'.", p), Type: "invalid_request_error",
				Param: p, Code: "missing_required_parameter"}, false
		}
	}
	if e, ok := checkLimit("max_tokens", req.MaxTokens); !ok {
		return e, false
	}
	if req.N != nil && (*req.N < 1 || *req.N > 128) {
		return invalid(fmt.Sprintf("Invalid 'n': expected a value between 1 and 128, but got %d instead.", *req.N), "n"), false
	}
	return checkLimit("max_completion_tokens", req.MaxCompletionTokens)
}

// streamChat sends the completion as chat.completion.chunk events: the
// role, one content delta per token, the finish reason, then the usage
// chunk (only when asked) and [DONE].
func (m *openAIMock) streamChat(w http.ResponseWriter, r *http.Request, resp chatResponse, c completion, withUsage bool, kind string) {
	s, ok := m.startStream(w, r)
	if !ok {
		return
	}
	resp.Object = "chat.completion.chunk"
	resp.nullUsage = withUsage
	choices := func(mk func(i int) chatChoice) error {
		resp.Choices = make([]chatChoice, c.choices)
		for i := range resp.Choices {
			resp.Choices[i] = mk(i)
		}
		return s.data(resp)
	}
	empty := ""
	if choices(func(i int) chatChoice {
		return chatChoice{Index: i, Delta: &chatDelta{Role: "assistant", Content: &empty}}
	}) != nil {
		return
	}
	if s.think(c.reasoning) != nil {
		return
	}
	for i, word := range c.words {
		if i > 0 {
			word = " " + word
			if s.pause() != nil {
				return
			}
		}
		if choices(func(i int) chatChoice { return chatChoice{Index: i, Delta: deltaOf(kind, word)} }) != nil {
			return
		}
	}
	if choices(func(i int) chatChoice { return chatChoice{Index: i, Delta: &chatDelta{}, FinishReason: &c.finish} }) != nil {
		return
	}
	if withUsage {
		resp.Choices = []chatChoice{}
		resp.Usage = c.chatUsage()
		if s.data(resp) != nil {
			return
		}
	}
	s.done()
}
