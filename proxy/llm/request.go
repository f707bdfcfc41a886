package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Kind is the API a request or response belongs to; it decides which fields
// carry the prompt, the output cap and the usage.
type Kind int

// The APIs this package understands. The zero Kind is invalid.
const (
	ChatCompletions   Kind = iota + 1 // POST /v1/chat/completions
	Completions                       // POST /v1/completions (legacy)
	Responses                         // POST /v1/responses
	Embeddings                        // POST /v1/embeddings
	AnthropicMessages                 // POST /v1/messages (Anthropic)
)

// String returns the API's name as used in error messages.
func (k Kind) String() string {
	switch k {
	case ChatCompletions:
		return "chat completions"
	case Completions:
		return "completions"
	case Responses:
		return "responses"
	case Embeddings:
		return "embeddings"
	case AnthropicMessages:
		return "anthropic messages"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// ErrInvalidRequest is wrapped by every error ParseRequest returns for a body
// the client got wrong; the proxy answers those with 400.
var ErrInvalidRequest = errors.New("invalid request body")

// Request is what the gateway needs to know about an LLM request before
// forwarding it.
type Request struct {
	// Model is the body's "model" field; empty when absent. The gateway, not
	// this package, decides whether a missing model is acceptable.
	Model string
	// Stream is the body's "stream" field.
	Stream bool
	// IncludeUsage is stream_options.include_usage: the client asked for the
	// usage chunk itself.
	IncludeUsage bool
	// MaxOutput is the most output tokens the request allows, 0 when the
	// body sets no cap (the route's default then applies). It is
	// max_completion_tokens, else max_tokens (chat completions), max_tokens
	// (completions, Anthropic messages) or max_output_tokens (responses),
	// multiplied by Choices.
	MaxOutput int64
	// Choices is how many outputs the upstream generates, at least 1: "n",
	// or "best_of" when larger (completions generate and bill best_of
	// outputs and return n). A route's default output cap, used when
	// MaxOutput is 0, should be multiplied by it too.
	Choices int64
	// PromptTokens estimates the prompt's tokens in the model's vocabulary
	// (see EncodingFor) with the formula of OpenAI's cookbook "How to count
	// tokens with tiktoken":
	//
	//	tokens = 3 (reply priming)
	//	       + Σ over messages: 3 + tokens(role) + tokens(each text in content)
	//	                          + tokens(name) + 1 if name is set
	//	                          + tokens(tool call names and arguments)
	//	       + 85 for each non-text part (image, audio, file)
	//	       + tokens(the raw JSON of "tools" / "functions")
	//
	// The same formula serves every kind: a responses request's
	// instructions count as one developer message and a string input as one
	// user message; Anthropic's system prompt counts as one system message;
	// completions and embeddings count only the text of prompt / input (an
	// array of token ids counts its length), without message overhead. The
	// tools' JSON overestimates a little (OpenAI renders schemas more
	// compactly), and a high-detail image costs more than 85: the
	// provider's usage corrects both.
	PromptTokens int64
}

// Cost estimates are approximations of what OpenAI documents in its
// "How to count tokens with tiktoken" cookbook for chat models.
const (
	tokensPerMessage = 3  // <|start|>{role}\n ... <|end|>\n around each message
	tokensPerName    = 1  // a message's "name" field
	tokensReplyPrime = 3  // every reply is primed with <|start|>assistant<|message|>
	tokensPerPart    = 85 // a non-text part (image, audio, file): a low-detail image's price
)

// wireRequest holds every field ParseRequest reads, across kinds. Pointers
// tell "absent" or null from zero.
type wireRequest struct {
	Model               string
	Stream              *bool
	IncludeUsage        *bool
	MaxTokens           *int64
	MaxCompletionTokens *int64
	MaxOutputTokens     *int64
	N                   *int64
	BestOf              *int64
	Messages            json.RawMessage
	Tools               json.RawMessage
	Functions           json.RawMessage
	Prompt              json.RawMessage
	Input               json.RawMessage
	Instructions        json.RawMessage
	System              json.RawMessage
}

// decode fills w from body. Keys are matched exactly, as the upstream
// matches them: encoding/json's struct decoding folds case, so
// {"max_tokens":4000,"MAX_TOKENS":1} would reserve for 1 token while the
// upstream generates 4000. A repeated key means its last value, as in
// encoding/json and Python's json.
func (w *wireRequest) decode(body []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return err
	}
	fields := []struct {
		name string
		dst  any
	}{
		{"model", &w.Model}, {"stream", &w.Stream},
		{"max_tokens", &w.MaxTokens}, {"max_completion_tokens", &w.MaxCompletionTokens},
		{"max_output_tokens", &w.MaxOutputTokens}, {"n", &w.N}, {"best_of", &w.BestOf},
		{"messages", &w.Messages}, {"tools", &w.Tools}, {"functions", &w.Functions},
		{"prompt", &w.Prompt}, {"input", &w.Input}, {"instructions", &w.Instructions},
		{"system", &w.System},
	}
	for _, f := range fields {
		if v, ok := top[f.name]; ok {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	if v := top["stream_options"]; len(v) > 0 && string(v) != "null" {
		var opts map[string]json.RawMessage
		if err := json.Unmarshal(v, &opts); err != nil {
			return fmt.Errorf("stream_options: %w", err)
		}
		if u, ok := opts["include_usage"]; ok {
			if err := json.Unmarshal(u, &w.IncludeUsage); err != nil {
				return fmt.Errorf("stream_options.include_usage: %w", err)
			}
		}
	}
	return nil
}

// ParseRequest reads an LLM request body of the given kind. It returns an
// error wrapping ErrInvalidRequest when the body is not one JSON object or a
// field it reads has the wrong type. It reads the whole of body: bounding
// the body's size (max_body_bytes) is the caller's job. It is safe for
// concurrent use.
func ParseRequest(kind Kind, body []byte) (Request, error) {
	if kind < ChatCompletions || kind > AnthropicMessages {
		return Request{}, fmt.Errorf("parsing request: unknown kind %d", int(kind))
	}
	if err := requireObject(body); err != nil {
		return Request{}, invalid(kind, err)
	}
	var w wireRequest
	if err := w.decode(body); err != nil {
		return Request{}, invalid(kind, err)
	}
	r := Request{Model: w.Model}
	if w.Stream != nil {
		r.Stream = *w.Stream
	}
	if w.IncludeUsage != nil {
		r.IncludeUsage = *w.IncludeUsage
	}
	var err error
	if r.Choices, err = choices(kind, &w); err != nil {
		return Request{}, invalid(kind, err)
	}
	if r.MaxOutput, err = maxOutput(kind, &w); err != nil {
		return Request{}, invalid(kind, err)
	}
	r.MaxOutput *= r.Choices
	if r.PromptTokens, err = promptTokens(kind, r.Model, &w); err != nil {
		return Request{}, invalid(kind, err)
	}
	return r, nil
}

func invalid(kind Kind, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrInvalidRequest, kind, err)
}

// requireObject rejects bodies json.Unmarshal would accept into a struct
// without complaint: null, and nothing at all.
func requireObject(body []byte) error {
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) == 0 {
		return errors.New("empty body")
	}
	if b[0] != '{' {
		if !json.Valid(body) {
			return errors.New("not valid JSON")
		}
		return errors.New("body must be a JSON object")
	}
	return nil
}

// choices returns how many outputs the upstream generates: the largest of
// n and best_of (chat completions and completions), at least 1.
func choices(kind Kind, w *wireRequest) (int64, error) {
	n := int64(1)
	if kind != ChatCompletions && kind != Completions {
		return n, nil
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"n", w.N}, {"best_of", w.BestOf}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > 128 {
			return 0, fmt.Errorf("%s must be between 1 and 128, got %d", f.name, *f.v)
		}
		n = max(n, *f.v)
	}
	return n, nil
}

// maxOutput returns the request's output cap for one choice, 0 if none.
func maxOutput(kind Kind, w *wireRequest) (int64, error) {
	var name string
	var v *int64
	switch kind {
	case ChatCompletions:
		name, v = "max_completion_tokens", w.MaxCompletionTokens
		if v == nil {
			name, v = "max_tokens", w.MaxTokens
		}
	case Completions, AnthropicMessages:
		name, v = "max_tokens", w.MaxTokens
	case Responses:
		name, v = "max_output_tokens", w.MaxOutputTokens
	}
	if v == nil {
		return 0, nil
	}
	if *v < 0 {
		return 0, fmt.Errorf("%s must be >= 0, got %d", name, *v)
	}
	return *v, nil
}

func promptTokens(kind Kind, model string, w *wireRequest) (int64, error) {
	c := counter{model: model}
	switch kind {
	case ChatCompletions:
		if err := c.messages("messages", w.Messages); err != nil {
			return 0, err
		}
		c.raw(w.Tools)
		c.raw(w.Functions)
		c.n += tokensReplyPrime
	case Responses:
		if err := c.single("instructions", "developer", w.Instructions); err != nil {
			return 0, err
		}
		if isString(w.Input) {
			if err := c.single("input", "user", w.Input); err != nil {
				return 0, err
			}
		} else if err := c.messages("input", w.Input); err != nil {
			return 0, err
		}
		c.raw(w.Tools)
		c.n += tokensReplyPrime
	case AnthropicMessages:
		if isString(w.System) {
			if err := c.single("system", "system", w.System); err != nil {
				return 0, err
			}
		} else if err := c.messages("system", w.System); err != nil {
			return 0, err
		}
		if err := c.messages("messages", w.Messages); err != nil {
			return 0, err
		}
		c.raw(w.Tools)
		c.n += tokensReplyPrime
	case Completions:
		if err := c.plain("prompt", w.Prompt); err != nil {
			return 0, err
		}
	case Embeddings:
		if err := c.plain("input", w.Input); err != nil {
			return 0, err
		}
	}
	return c.n, nil
}

// counter sums the estimate for one request.
type counter struct {
	model string
	n     int64
}

func (c *counter) text(s string) { c.n += CountTokens(c.model, s) }

func (c *counter) raw(b json.RawMessage) {
	if len(b) > 0 && string(b) != "null" {
		c.text(string(b))
	}
}

func isString(b json.RawMessage) bool { return len(b) > 0 && b[0] == '"' }

// single counts a string field as one message of the given role.
func (c *counter) single(field, role string, b json.RawMessage) error {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s must be a string", field)
	}
	c.n += tokensPerMessage
	c.text(role)
	c.text(s)
	return nil
}

// messages counts an array of messages (chat messages, responses input
// items, Anthropic messages or system blocks).
func (c *counter) messages(field string, b json.RawMessage) error {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return fmt.Errorf("%s must be an array", field)
	}
	for i, item := range items {
		var m map[string]any
		if err := json.Unmarshal(item, &m); err != nil || m == nil {
			return fmt.Errorf("%s[%d] must be an object", field, i)
		}
		if err := c.message(m); err != nil {
			return fmt.Errorf("%s[%d].%w", field, i, err)
		}
	}
	return nil
}

func (c *counter) message(m map[string]any) error {
	if role, ok := m["role"]; ok {
		s, ok := role.(string)
		if !ok {
			return errors.New("role must be a string")
		}
		c.n += tokensPerMessage
		c.text(s)
		if name, ok := m["name"].(string); ok {
			c.n += tokensPerName
			c.text(name)
		}
		switch m["content"].(type) {
		case nil, string, []any:
		default:
			return errors.New("content must be a string, an array or null")
		}
	}
	c.part(m)
	return nil
}

// textKeys are the fields whose strings reach the model as text; anything
// else (ids, urls, base64 payloads) is not counted.
var textKeys = []string{"content", "text", "arguments", "output", "summary", "refusal", "tool_calls", "function", "input", "thinking"}

// nonText are part types priced flat (tokensPerPart).
var nonText = map[string]bool{
	"image_url": true, "input_image": true, "image": true,
	"input_audio": true, "input_file": true, "file": true, "document": true,
}

func (c *counter) part(m map[string]any) {
	if t, _ := m["type"].(string); nonText[t] {
		c.n += tokensPerPart
		return
	}
	if _, isMessage := m["role"]; !isMessage {
		// A tool call or function item: its name reaches the model.
		if name, ok := m["name"].(string); ok {
			c.text(name)
		}
	}
	for _, k := range textKeys {
		if v, ok := m[k]; ok {
			c.value(v)
		}
	}
}

func (c *counter) value(v any) {
	switch x := v.(type) {
	case string:
		c.text(x)
	case []any:
		for _, e := range x {
			c.value(e)
		}
	case map[string]any:
		c.part(x)
	}
}

// plain counts a completions prompt or an embeddings input: a string, an
// array of strings, an array of token ids or an array of such arrays.
func (c *counter) plain(field string, b json.RawMessage) error {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	switch x := v.(type) {
	case string:
		c.text(x)
		return nil
	case []any:
		for i, e := range x {
			switch y := e.(type) {
			case string:
				c.text(y)
			case float64:
				c.n++
			case []any:
				for _, t := range y {
					if _, ok := t.(float64); !ok {
						return fmt.Errorf("%s[%d] must be an array of token ids", field, i)
					}
				}
				c.n += int64(len(y))
			default:
				return fmt.Errorf("%s[%d] must be a string, a token id or an array of token ids", field, i)
			}
		}
		return nil
	}
	return fmt.Errorf("%s must be a string or an array", field)
}
