package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
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
	ImageGenerations                  // POST /v1/images/generations
	Speech                            // POST /v1/audio/speech
	Transcription                     // POST /v1/audio/transcriptions, translations (multipart)
	ImageEdits                        // POST /v1/images/edits (multipart)
	ImageVariations                   // POST /v1/images/variations (multipart)
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
	case ImageGenerations:
		return "image generations"
	case Speech:
		return "speech"
	case Transcription:
		return "transcription"
	case ImageEdits:
		return "image edits"
	case ImageVariations:
		return "image variations"
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
	// CapField is the body's field that carries the output cap for this
	// kind and model (max_completion_tokens for chat on reasoning models,
	// max_tokens elsewhere on chat, completions and Anthropic messages,
	// max_output_tokens on responses); "" for embeddings.
	CapField string
	// OtherCap is the chat field (max_tokens or max_completion_tokens)
	// that holds a smaller cap than the one MaxOutput was read from, ""
	// when the body sets one cap or both alike: the gateway sets it to
	// the cap it reserves (see SetOutputCap), so that the call is held to
	// what it reserved whichever field the provider reads.
	OtherCap string
	// UnitMicroUSD is the price of a call billed per unit (an image, a
	// character), in micro-dollars, which usd policies take instead of
	// its tokens at the model's prices; 0 for a call billed by tokens.
	UnitMicroUSD int64
	// NoUsage says the answer carries no usage (a call billed per unit,
	// audio bytes): the call is settled at its reservation, which is
	// what it was billed.
	NoUsage bool
	// HasCap says the body set an output cap; a call without one is given
	// one (see WithOutputCap) so that what it reserves bounds what it is
	// billed.
	HasCap bool
	// Family is the model's family in the table the request was parsed
	// with: its bounds on images, audio, files and output.
	Family Family
	// Unsized names the parts of the request whose billed size the gateway
	// cannot see (a previous response, a conversation, a stored prompt, an
	// item reference, a built-in tool); empty when every billed token is
	// in the body.
	Unsized []string
	// MaxToolCalls is the responses max_tool_calls, 0 when absent.
	MaxToolCalls int64
	// Choices is how many outputs the upstream generates, at least 1: "n",
	// or "best_of" when larger (completions generate and bill best_of
	// outputs and return n). A route's default output cap, used when
	// MaxOutput is 0, should be multiplied by it too.
	Choices int64
	// ServiceTier is the body's service_tier ("" when absent): what it is
	// priced at (see Price.Reach).
	ServiceTier string
	// AudioInput says the prompt holds audio; AudioOutput that the call
	// asks for audio back (modalities names audio, or audio is set).
	AudioInput, AudioOutput bool
	// PredictionTokens are the tokens of a chat call's prediction
	// (Predicted Outputs): the tokens of it the answer does not use are
	// billed as output, on top of the output cap, so a call reserves them
	// as output.
	PredictionTokens int64
	// PromptTokens estimates the prompt's tokens in the model's vocabulary
	// (see EncodingFor) with the formula of OpenAI's cookbook "How to count
	// tokens with tiktoken":
	//
	//	tokens = 3 (reply priming)
	//	       + Σ over messages: 3 + tokens(role) + tokens(each text in content)
	//	                          + tokens(name) + 1 if name is set
	//	                          + tokens(tool call names and arguments)
	//	       + the family's bound for each non-text part (see Family)
	//	       + tokens(the raw JSON of "tools" / "functions")
	//
	// The same formula serves every kind: a responses request's
	// instructions count as one developer message and a string input as one
	// user message; Anthropic's system prompt counts as one system message;
	// completions and embeddings count only the text of prompt / input (an
	// array of token ids counts its length), without message overhead. The
	// tools' JSON overestimates a little (OpenAI renders schemas more
	// compactly), and a non-text part is reserved at its family's upper
	// bound: the provider's usage corrects both. The sum saturates at
	// math.MaxInt64 instead of wrapping.
	//
	// Every value the count does not understand (a field a provider adds
	// tomorrow, a schema, an id, a hidden member of a message) is added at
	// the bytes of its JSON text, key included: a token covers at least one
	// byte, so nothing in the body is free.
	PromptTokens int64
}

// Cost estimates are approximations of what OpenAI documents in its
// "How to count tokens with tiktoken" cookbook for chat models.
const (
	tokensPerMessage = 3 // <|start|>{role}\n ... <|end|>\n around each message
	tokensPerName    = 1 // a message's "name" field
	tokensReplyPrime = 3 // every reply is primed with <|start|>assistant<|message|>
)

// MaxChoices is the most outputs one request may ask for (n, best_of), as
// OpenAI accepts.
const MaxChoices = 128

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
	MaxToolCalls        *int64
	PreviousResponseID  json.RawMessage
	Conversation        json.RawMessage
	StoredPrompt        json.RawMessage
	WebSearchOptions    json.RawMessage
	Messages            json.RawMessage
	Tools               json.RawMessage
	Functions           json.RawMessage
	Prompt              json.RawMessage
	Input               json.RawMessage
	Instructions        json.RawMessage
	System              json.RawMessage
	ServiceTier         json.RawMessage
	Modalities          json.RawMessage
	Audio               json.RawMessage
	Prediction          json.RawMessage
	MCPServers          json.RawMessage
	// unread is the bytes of the top-level members nothing else reads.
	unread int64
}

// wireField is one top-level field decode reads, and where it goes.
type wireField struct {
	name string
	dst  any
}

// fields lists, in the order they are decoded (which decides the error a
// body with several bad fields gets), the top-level fields of kind.
func (w *wireRequest) fields(kind Kind) [23]wireField {
	// On responses "prompt" is a stored prompt's reference; on
	// completions it is the text.
	prompt := &w.Prompt
	if kind == Responses {
		prompt = &w.StoredPrompt
	}
	return [...]wireField{
		{"model", &w.Model}, {"stream", &w.Stream},
		{"max_tokens", &w.MaxTokens}, {"max_completion_tokens", &w.MaxCompletionTokens},
		{"max_output_tokens", &w.MaxOutputTokens}, {"n", &w.N}, {"best_of", &w.BestOf},
		{"messages", &w.Messages}, {"tools", &w.Tools}, {"functions", &w.Functions},
		{"input", &w.Input}, {"instructions", &w.Instructions},
		{"system", &w.System}, {"max_tool_calls", &w.MaxToolCalls},
		{"previous_response_id", &w.PreviousResponseID}, {"conversation", &w.Conversation},
		{"web_search_options", &w.WebSearchOptions}, {"prompt", prompt},
		{"service_tier", &w.ServiceTier}, {"modalities", &w.Modalities}, {"audio", &w.Audio},
		{"prediction", &w.Prediction}, {"mcp_servers", &w.MCPServers},
	}
}

// controls are the top-level fields no provider bills as tokens: they set
// how the call runs, and a provider refuses a value of the wrong type. Any
// other field the count does not read is bounded by its bytes.
var controls = map[string]bool{
	"model": true, "stream": true, "stream_options": true, "max_tokens": true,
	"max_completion_tokens": true, "max_output_tokens": true, "n": true, "best_of": true,
	"max_tool_calls": true, "temperature": true, "top_p": true, "top_k": true, "seed": true,
	"presence_penalty": true, "frequency_penalty": true, "logprobs": true, "top_logprobs": true,
	"store": true, "parallel_tool_calls": true, "service_tier": true, "user": true,
	"reasoning_effort": true, "safety_identifier": true, "prompt_cache_key": true,
	"background": true, "truncation": true,
}

// counted are, by kind, the top-level fields the count reads (or that
// make a call unsized, or are reserved as output).
var counted = [...][]string{
	ChatCompletions:   {"messages", "tools", "functions", "prediction", "web_search_options"},
	Responses:         {"instructions", "input", "tools", "previous_response_id", "conversation", "prompt"},
	AnthropicMessages: {"system", "messages", "tools", "mcp_servers"},
	Completions:       {"prompt"},
	Embeddings:        {"input"},
}

// unread is the bytes of the top-level members of a valid body that
// neither the count nor controls read, keys included (see
// Request.PromptTokens); a repeated key's earlier values among them.
func unread(kind Kind, top []member) int64 {
	var read []string
	if int(kind) < len(counted) {
		read = counted[kind]
	}
	// From the last member back, so that a repeated key's last value is
	// the one read, in one pass whatever the repeats.
	var n int64
	var seen uint64 // by index in read
	for i := len(top) - 1; i >= 0; i-- {
		m := top[i]
		if controls[string(m.key)] {
			continue
		}
		if j := slices.Index(read, string(m.key)); j >= 0 && seen&(1<<j) == 0 {
			seen |= 1 << j
			continue
		}
		n = AddSat(n, memberBytes(m))
	}
	return n
}

// memberBytes bounds the bytes of m's JSON text: its key, quoted, the
// colon and the value.
func memberBytes(m member) int64 { return int64(len(m.key)+3) + int64(m.end-m.val) }

// decode fills w from body. Keys are matched exactly, as the upstream
// matches them: encoding/json's struct decoding folds case, so
// {"max_tokens":4000,"MAX_TOKENS":1} would reserve for 1 token while the
// upstream generates 4000. A repeated key means its last value, as in
// encoding/json and Python's json.
//
// Every call on an llm route runs it, so a valid body is walked in place
// (members) and its plain values are read without reflection; an invalid
// one takes encoding/json's path, whose error the client gets.
func (w *wireRequest) decode(kind Kind, body []byte) error {
	var buf [16]member
	top, ok := validMembers(body, buf[:0])
	if !ok {
		w.unread = int64(len(body)) // nothing read in place: every byte counts
		return w.decodeMap(kind, body)
	}
	w.unread = unread(kind, top)
	for _, f := range w.fields(kind) {
		if m, ok := last(top, f.name); ok {
			if err := decodeValue(body[m.val:m.end], f.dst); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	m, ok := last(top, "stream_options")
	if !ok || body[m.val] == 'n' { // absent or null
		return nil
	}
	if body[m.val] != '{' {
		return w.streamOptions(body[m.val:m.end])
	}
	if iu, ok := last(members(body, m.val), "include_usage"); ok {
		if err := decodeValue(body[iu.val:iu.end], &w.IncludeUsage); err != nil {
			return fmt.Errorf("stream_options.include_usage: %w", err)
		}
	}
	return nil
}

// decodeValue stores the valid JSON value v in dst as json.Unmarshal
// would, reading the plain cases (a string without escapes, a boolean, an
// integer, null, a raw value) without it. A raw value aliases v.
func decodeValue(v []byte, dst any) error {
	switch d := dst.(type) {
	case *json.RawMessage:
		*d = v
		return nil
	case *string:
		if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
			*d = string(v[1 : len(v)-1])
			return nil
		}
	case **bool:
		switch string(v) {
		case "null":
			*d = nil
			return nil
		case "true", "false":
			b := v[0] == 't'
			*d = &b
			return nil
		}
	case **int64:
		if string(v) == "null" {
			*d = nil
			return nil
		}
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			*d = &n
			return nil
		}
	}
	return json.Unmarshal(v, dst)
}

// decodeMap is decode through encoding/json alone: what decode does with
// a body that is not valid JSON, to fail as encoding/json fails.
func (w *wireRequest) decodeMap(kind Kind, body []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return err
	}
	for _, f := range w.fields(kind) {
		if v, ok := top[f.name]; ok {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	if v := top["stream_options"]; len(v) > 0 && string(v) != "null" {
		return w.streamOptions(v)
	}
	return nil
}

// streamOptions reads the stream_options object v.
func (w *wireRequest) streamOptions(v []byte) error {
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(v, &opts); err != nil {
		return fmt.Errorf("stream_options: %w", err)
	}
	if u, ok := opts["include_usage"]; ok {
		if err := json.Unmarshal(u, &w.IncludeUsage); err != nil {
			return fmt.Errorf("stream_options.include_usage: %w", err)
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
	return ParseRequestFor(kind, body, nil)
}

// ParseRequestFor is ParseRequest with the model families of models (nil:
// the built-in table): they bound non-text parts and the output cap. A cap
// above the family's MaxOutputTokens, n or best_of outside 1..MaxChoices,
// max_tool_calls below 0, and any number that is not an integer int64
// holds are errors wrapping ErrInvalidRequest, as the provider refuses
// them.
func ParseRequestFor(kind Kind, body []byte, models Models) (Request, error) {
	return ParseRequestPaced(kind, body, models, Pace{})
}

// ParseRequestPaced is ParseRequestFor counting a long text at pace: a
// large prompt then leaves the cores it shares a part of their time (see
// Pace). The count is the same.
func ParseRequestPaced(kind Kind, body []byte, models Models, pace Pace) (Request, error) {
	return parseRequest(kind, body, nil, models, pace)
}

// Rename maps the model a call names to the model it is counted and
// priced as: a deployment to the model it serves. Its error refuses the
// call.
type Rename func(model string) (string, error)

// model is name through f; a nil f keeps it.
func (f Rename) model(name string) (string, error) {
	if f == nil {
		return name, nil
	}
	return f(name)
}

// ParseCall reads a call of kind, counted at pace: a multipart form for
// transcriptions and image uploads (contentType gives its boundary), a
// JSON object for the rest. rename, when not nil, maps the model the call
// names before anything is read by it. Errors wrap ErrInvalidRequest, or
// are rename's.
func ParseCall(kind Kind, contentType string, body []byte, rename Rename, models Models, pace Pace) (Request, error) {
	switch kind {
	case Transcription:
		return parseTranscription(contentType, body, rename, models, pace)
	case ImageEdits, ImageVariations:
		return parseImageUpload(kind, contentType, body, rename, models, pace)
	}
	return parseRequest(kind, body, rename, models, pace)
}

func parseRequest(kind Kind, body []byte, rename Rename, models Models, pace Pace) (Request, error) {
	switch {
	case kind == ImageGenerations:
		return parseImages(body, rename, models, pace)
	case kind == Speech:
		return parseSpeech(body, rename, models, pace)
	case kind < ChatCompletions || kind > AnthropicMessages:
		return Request{}, fmt.Errorf("parsing request: unknown kind %d", int(kind))
	}
	if err := requireObject(body); err != nil {
		return Request{}, invalid(kind, err)
	}
	var w wireRequest
	if err := w.decode(kind, body); err != nil {
		return Request{}, invalid(kind, err)
	}
	var err error
	if w.Model, err = rename.model(w.Model); err != nil {
		return Request{}, err
	}
	r := Request{Model: w.Model, Family: models.For(w.Model)}
	if w.Stream != nil {
		r.Stream = *w.Stream
	}
	if w.IncludeUsage != nil {
		r.IncludeUsage = *w.IncludeUsage
	}
	if r.Choices, err = choices(kind, &w); err != nil {
		return Request{}, invalid(kind, err)
	}
	r.CapField = capField(kind, r.Family)
	var capName string
	var cp *int64
	if capName, cp, r.OtherCap, err = maxOutput(kind, &w); err != nil {
		return Request{}, invalid(kind, err)
	}
	if cp != nil {
		if *cp > r.Family.MaxOutputTokens {
			return Request{}, invalid(kind, fmt.Errorf("%s is too large: %d. This model supports at most %d output tokens",
				capName, *cp, r.Family.MaxOutputTokens))
		}
		r.HasCap, r.MaxOutput = true, MulSat(*cp, r.Choices)
	}
	if w.MaxToolCalls != nil {
		if *w.MaxToolCalls < 0 {
			return Request{}, invalid(kind, fmt.Errorf("max_tool_calls must be >= 0, got %d", *w.MaxToolCalls))
		}
		r.MaxToolCalls = *w.MaxToolCalls
	}
	c := counter{model: r.Model, family: r.Family, pace: pace}
	if err = c.prompt(kind, &w); err != nil {
		return Request{}, invalid(kind, err)
	}
	r.PromptTokens, r.Unsized = AddSat(c.n, AddSat(c.rest, w.unread)), unsized(kind, &w, c.unsized)
	r.AudioInput = c.audioParts > 0
	if r.ServiceTier, r.AudioOutput, err = pricing(&w); err != nil {
		return Request{}, invalid(kind, err)
	}
	if kind == ChatCompletions && len(w.Prediction) > 0 && string(w.Prediction) != "null" {
		if r.PredictionTokens, err = prediction(w.Prediction, c); err != nil {
			return Request{}, invalid(kind, err)
		}
	}
	return r, nil
}

// prediction counts a chat call's prediction ({"type": "content",
// "content": a string or text parts}) as output a provider may bill: its
// text by the count, anything else in it by its bytes.
func prediction(b json.RawMessage, c counter) (int64, error) {
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		return 0, errors.New("prediction must be an object")
	}
	c.n, c.rest = 0, 0
	c.part(p, false)
	return AddSat(c.n, c.rest), nil
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
		if *f.v < 1 || *f.v > MaxChoices {
			return 0, fmt.Errorf("%s must be between 1 and %d, got %d", f.name, MaxChoices, *f.v)
		}
		n = max(n, *f.v)
	}
	return n, nil
}

// capField is the field the output cap of kind goes in for family.
func capField(kind Kind, f Family) string {
	switch kind {
	case ChatCompletions:
		if f.Reasoning {
			return "max_completion_tokens"
		}
		return "max_tokens"
	case Completions, AnthropicMessages:
		return "max_tokens"
	case Responses:
		return "max_output_tokens"
	}
	return ""
}

// maxOutput returns the request's output cap for one choice and the field
// that set it, nil if none; and, when chat sets both of its caps to
// different values, the field that holds the smaller (other), which the
// gateway raises to the cap it reserved: which one a provider reads is
// its to choose, and either must be what the call reserved. A cap below 1
// is refused: no provider takes it, and a 0 read as "no cap" by one would
// generate past the reservation.
func maxOutput(kind Kind, w *wireRequest) (name string, v *int64, other string, err error) {
	type capField struct {
		name string
		v    *int64
	}
	var caps []capField
	switch kind {
	case ChatCompletions:
		caps = []capField{{"max_completion_tokens", w.MaxCompletionTokens}, {"max_tokens", w.MaxTokens}}
	case Completions, AnthropicMessages:
		caps = []capField{{"max_tokens", w.MaxTokens}}
	case Responses:
		caps = []capField{{"max_output_tokens", w.MaxOutputTokens}}
	}
	for _, c := range caps {
		if c.v == nil {
			continue
		}
		if *c.v < 1 {
			return c.name, nil, "", fmt.Errorf("%s must be >= 1, got %d", c.name, *c.v)
		}
		switch {
		case v == nil:
			name, v = c.name, c.v
		case *c.v > *v:
			other = name
			name, v = c.name, c.v
		case *c.v < *v:
			other = c.name
		}
	}
	if name == "" && len(caps) > 0 {
		name = caps[0].name
	}
	return name, v, other, nil
}

// unsized lists what a request makes the provider bill that its body does
// not hold.
func unsized(kind Kind, w *wireRequest, found []string) []string {
	present := func(b json.RawMessage) bool {
		s := string(bytes.TrimSpace(b))
		return len(s) > 0 && s != "null" && s != `""`
	}
	var out []string
	if kind == Responses {
		for _, f := range []struct {
			name string
			v    json.RawMessage
		}{{"previous_response_id", w.PreviousResponseID}, {"conversation", w.Conversation}, {"prompt", w.StoredPrompt}} {
			if present(f.v) {
				out = append(out, f.name)
			}
		}
	}
	if kind == ChatCompletions && present(w.WebSearchOptions) {
		out = append(out, "web_search_options")
	}
	if kind == AnthropicMessages && present(w.MCPServers) && string(bytes.TrimSpace(w.MCPServers)) != "[]" {
		out = append(out, "mcp_servers") // remote tools, as OpenAI's mcp tool
	}
	if present(w.Tools) {
		var tools []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(w.Tools, &tools) == nil {
			for i, t := range tools {
				if t.Type != "" && t.Type != "function" && t.Type != "custom" {
					out = append(out, fmt.Sprintf("tools[%d] (%s)", i, t.Type))
				}
			}
		}
	}
	return append(out, found...)
}

func (c *counter) prompt(kind Kind, w *wireRequest) error {
	switch kind {
	case ChatCompletions:
		if err := c.messages("messages", w.Messages); err != nil {
			return err
		}
		c.raw(w.Tools)
		c.raw(w.Functions)
		c.add(tokensReplyPrime)
	case Responses:
		if err := c.single("instructions", "developer", w.Instructions); err != nil {
			return err
		}
		if isString(w.Input) {
			if err := c.single("input", "user", w.Input); err != nil {
				return err
			}
		} else if err := c.messages("input", w.Input); err != nil {
			return err
		}
		c.raw(w.Tools)
		c.add(tokensReplyPrime)
	case AnthropicMessages:
		if isString(w.System) {
			if err := c.single("system", "system", w.System); err != nil {
				return err
			}
		} else if err := c.messages("system", w.System); err != nil {
			return err
		}
		if err := c.messages("messages", w.Messages); err != nil {
			return err
		}
		c.raw(w.Tools)
		c.add(tokensReplyPrime)
	case Completions:
		if err := c.plain("prompt", w.Prompt); err != nil {
			return err
		}
	case Embeddings:
		if err := c.plain("input", w.Input); err != nil {
			return err
		}
	}
	return nil
}

// counter sums the estimate for one request.
type counter struct {
	model   string
	enc     Encoding // model's, once a text is counted
	family  Family
	n       int64
	rest    int64    // bytes of the values the count does not read
	unsized []string // item references found in the input
	pace    Pace     // how a long text is counted
	// audioParts counts the input_audio parts.
	audioParts int
}

// add adds n tokens, saturating (see AddSat).
func (c *counter) add(n int64) { c.n = AddSat(c.n, n) }

func (c *counter) text(s string) {
	if c.enc == "" {
		c.enc = EncodingFor(c.model)
	}
	c.add(countIn(c.enc, s, c.pace))
}

// textJSON counts the valid JSON string v as text does its value; a
// string without escapes is counted from the body's bytes, not copied.
func (c *counter) textJSON(v []byte) {
	b, ok := plainString(v)
	if !ok {
		c.text(stringValue(v))
		return
	}
	if c.enc == "" {
		c.enc = EncodingFor(c.model)
	}
	c.add(countBytesIn(c.enc, b, c.pace))
}

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
	c.add(tokensPerMessage)
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
	if c.messagesPlain(b) {
		return nil
	}
	return c.messagesDecoded(field, b)
}

// messagesDecoded is messages through encoding/json's generic values.
func (c *counter) messagesDecoded(field string, b json.RawMessage) error {
	// One decode of the whole array, into the generic values message
	// reads; an error there is told apart item by item.
	var all []any
	if err := json.Unmarshal(b, &all); err == nil {
		for i, item := range all {
			m, ok := item.(map[string]any)
			if !ok {
				return fmt.Errorf("%s[%d] must be an object", field, i)
			}
			if err := c.message(m); err != nil {
				return fmt.Errorf("%s[%d].%w", field, i, err)
			}
		}
		return nil
	}
	return c.messagesOneByOne(field, b)
}

// messagesOneByOne is messages decoding the array item by item: slower,
// and it tells which item is not an object (or holds a number a float64
// does not).
func (c *counter) messagesOneByOne(field string, b json.RawMessage) error {
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
		c.add(tokensPerMessage)
		c.text(s)
		if name, ok := m["name"].(string); ok {
			c.add(tokensPerName)
			c.text(name)
		}
		switch m["content"].(type) {
		case nil, string, []any:
		default:
			return errors.New("content must be a string, an array or null")
		}
	}
	c.part(m, true)
	return nil
}

// textKeys are the fields whose strings reach the model as text; any
// other member of a message or a part (an id, a url, a field a provider
// adds) is bounded by its bytes.
var textKeys = []string{"content", "text", "arguments", "output", "summary", "refusal", "tool_calls", "function", "input", "thinking", "function_call", "custom"}

// holdsParts says the values of key are parts where a non-text part is
// billed as one (an image, audio, a file): a message's content, a tool's
// output. Elsewhere (a tool's input, arguments) an object typed "image"
// is text like any other.
func holdsParts(key string) bool { return key == "content" || key == "output" }

// readKey reports whether part reads the member key whose value is
// string-typed or not (str): role, name and type are read as strings.
func readKey(key string, str bool) bool {
	switch key {
	case "role", "name", "type":
		return str
	}
	for _, k := range textKeys {
		if k == key {
			return true
		}
	}
	return false
}

func (c *counter) part(m map[string]any, parts bool) {
	t, _ := m["type"].(string)
	if parts {
		switch t {
		case "image_url", "input_image", "image":
			c.add(c.image(m))
			return
		case "input_audio":
			c.audioParts++
			c.add(c.audio(m))
			return
		case "input_file", "file", "document":
			c.add(c.family.FileTokens)
			return
		case "item_reference":
			c.unsized = append(c.unsized, "input item_reference")
			return
		}
	}
	if _, isMessage := m["role"]; !isMessage {
		// A tool call or function item: its name reaches the model.
		if name, ok := m["name"].(string); ok {
			c.text(name)
		}
	}
	for k, v := range m {
		if _, str := v.(string); !readKey(k, str) {
			c.rest = AddSat(c.rest, AddSat(int64(len(k)+3), jsonLen(v)))
		}
	}
	for _, k := range textKeys {
		if v, ok := m[k]; ok {
			c.value(v, holdsParts(k))
		}
	}
}

func (c *counter) value(v any, parts bool) {
	switch x := v.(type) {
	case string:
		c.text(x)
	case []any:
		for _, e := range x {
			c.value(e, parts)
		}
	case map[string]any:
		c.part(x, parts)
	}
}

// jsonLen bounds the bytes of v's JSON text as encoding/json writes it
// (a string by its decoded bytes and quotes), saturating.
func jsonLen(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x) + 2)
	case float64:
		var buf [32]byte
		return int64(len(strconv.AppendFloat(buf[:0], x, 'g', -1, 64)))
	case bool:
		return 5
	case nil:
		return 4
	case []any:
		n := int64(1 + len(x))
		for _, e := range x {
			n = AddSat(n, jsonLen(e))
		}
		return n
	case map[string]any:
		n := int64(1 + len(x))
		for k, e := range x {
			n = AddSat(n, AddSat(int64(len(k)+3), jsonLen(e)))
		}
		return n
	}
	return 0
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
				c.add(1)
			case []any:
				for _, t := range y {
					if _, ok := t.(float64); !ok {
						return fmt.Errorf("%s[%d] must be an array of token ids", field, i)
					}
				}
				c.add(int64(len(y)))
			default:
				return fmt.Errorf("%s[%d] must be a string, a token id or an array of token ids", field, i)
			}
		}
		return nil
	}
	return fmt.Errorf("%s must be a string or an array", field)
}

// image bounds an image part: its family's low-detail bound when the part
// asks for low detail, else the high-detail one (auto may pick high). The
// detail is the part's own (responses, "detail") or its image_url's (chat).
func (c *counter) image(m map[string]any) int64 {
	detail, _ := m["detail"].(string)
	if iu, ok := m["image_url"].(map[string]any); ok {
		if d, ok := iu["detail"].(string); ok {
			detail = d
		}
	}
	if detail == "low" {
		return c.family.ImageLow
	}
	return c.family.ImageHigh
}

// audio bounds an input_audio part from its base64 data's decoded length.
func (c *counter) audio(m map[string]any) int64 {
	data, _ := m["data"].(string)
	if in, ok := m["input_audio"].(map[string]any); ok {
		data, _ = in["data"].(string)
	}
	per := max(c.family.AudioBytesPerToken, 1)
	decoded := int64(len(data)) / 4 * 3
	return (decoded + per - 1) / per
}
