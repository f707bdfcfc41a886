package builtin

import (
	"encoding/json"
	"net/http"
)

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    string          `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
}

type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	TotalTokens        int `json:"total_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

func (c completion) responsesUsage() *responsesUsage {
	u := &responsesUsage{InputTokens: c.prompt, OutputTokens: c.tokens(), TotalTokens: c.prompt + c.tokens()}
	u.InputTokensDetails.CachedTokens = c.cached
	u.OutputTokensDetails.ReasoningTokens = c.reasoning
	return u
}

type outputText struct {
	Type        string `json:"type"` // "output_text"
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type outputItem struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"` // "message"
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseObject struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // "response"
	CreatedAt         int64              `json:"created_at"`
	Status            string             `json:"status"`
	IncompleteDetails *incompleteDetails `json:"incomplete_details"`
	Model             string             `json:"model"`
	Output            []outputItem       `json:"output"`
	Usage             *responsesUsage    `json:"usage"`
}

// responses answers POST /v1/responses.
func (m *openAIMock) responses(w http.ResponseWriter, r *http.Request, body []byte) {
	var req responsesRequest
	if e, ok := decodeRequest(body, &req); !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	if req.Model == "" {
		writeOpenAIError(w, http.StatusBadRequest, apiError{Message: "you must provide a model parameter",
			Type: "invalid_request_error", Param: "model", Code: "missing_required_parameter"})
		return
	}
	if e, ok := checkLimit("max_output_tokens", req.MaxOutputTokens); !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	prompt, e, ok := m.inputTokens(req.Model, req.Input)
	if !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	if req.Instructions != "" {
		prompt += tokensPerMessage + m.cfg.CountTokens(req.Model, "developer") + m.cfg.CountTokens(req.Model, req.Instructions)
	}
	prompt += m.hiddenTokens(req.Model, body, responsesRead, "input")
	c := m.complete(prompt, req.MaxOutputTokens, 1)
	resp := responseObject{ID: m.newID("resp"), Object: "response", CreatedAt: m.cfg.Now().Unix(),
		Model: req.Model, Output: []outputItem{}}
	item := outputItem{ID: m.newID("msg"), Type: "message", Status: "completed", Role: "assistant",
		Content: []outputText{{Type: "output_text", Text: c.text(), Annotations: []any{}}}}
	if req.Stream {
		m.streamResponse(w, r, resp, item, c)
		return
	}
	if err := m.wait(r.Context(), c.tokens()); err != nil {
		return // the client has gone
	}
	finishResponse(&resp, item, c)
	writeJSON(w, http.StatusOK, resp)
}

// finishResponse sets what a finished response carries: its status (cut at
// max_output_tokens is "incomplete", as OpenAI reports it), output and usage.
func finishResponse(resp *responseObject, item outputItem, c completion) {
	resp.Status = "completed"
	if c.finish == "length" {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
		item.Status = "incomplete"
	}
	resp.Output = []outputItem{item}
	resp.Usage = c.responsesUsage()
}

// inputTokens counts the Responses API's input: a string (one user message)
// or an array of message items.
func (m *openAIMock) inputTokens(model string, raw json.RawMessage) (int, apiError, bool) {
	missing := apiError{Message: "Missing required parameter: 'input'.", Type: "invalid_request_error",
		Param: "input", Code: "missing_required_parameter"}
	if len(raw) == 0 || string(raw) == "null" {
		return 0, missing, false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return 0, missing, false
		}
		return tokensPerReply + tokensPerMessage + m.cfg.CountTokens(model, "user") + m.cfg.CountTokens(model, s), apiError{}, true
	}
	var items []message
	if err := json.Unmarshal(raw, &items); err != nil {
		return 0, invalid("Invalid type for 'input': expected a string or an array of input items", "input"), false
	}
	if len(items) == 0 {
		return 0, missing, false
	}
	return m.promptTokens(model, items, "input")
}

// streamResponse sends the Responses API's events: created, in_progress,
// the output item and its text part opening, one output_text.delta per
// token, their closing, then response.completed (or response.incomplete
// when max_output_tokens cut it) with the usage. The Responses API always
// streams its usage, and ends without [DONE].
func (m *openAIMock) streamResponse(w http.ResponseWriter, r *http.Request, resp responseObject, item outputItem, c completion) {
	s, ok := m.startStream(w, r)
	if !ok {
		return
	}
	seq := 0
	send := func(typ string, fields map[string]any) error {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		return s.event(typ, fields)
	}
	final := item
	resp.Status = "in_progress"
	open := item
	open.Status, open.Content = "in_progress", []outputText{}
	part := outputText{Type: "output_text", Text: "", Annotations: []any{}}
	at := func(fields map[string]any) map[string]any {
		fields["item_id"], fields["output_index"], fields["content_index"] = item.ID, 0, 0
		return fields
	}
	steps := []func() error{
		func() error { return send("response.created", map[string]any{"response": resp}) },
		func() error { return send("response.in_progress", map[string]any{"response": resp}) },
		func() error {
			return send("response.output_item.added", map[string]any{"output_index": 0, "item": open})
		},
		func() error { return send("response.content_part.added", at(map[string]any{"part": part})) },
	}
	for _, step := range steps {
		if step() != nil {
			return
		}
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
		event := "response.output_text.delta"
		if r.Header.Get(MockDeltaHeader) == "custom" {
			event = "response.custom_tool_call_input.delta"
		}
		if send(event, at(map[string]any{"delta": word})) != nil {
			return
		}
	}
	finishResponse(&resp, final, c)
	done := "response.completed"
	if resp.Status == "incomplete" {
		done = "response.incomplete"
	}
	steps = []func() error{
		func() error { return send("response.output_text.done", at(map[string]any{"text": c.text()})) },
		func() error { return send("response.content_part.done", at(map[string]any{"part": final.Content[0]})) },
		func() error {
			return send("response.output_item.done", map[string]any{"output_index": 0, "item": resp.Output[0]})
		},
		func() error { return send(done, map[string]any{"response": resp}) },
	}
	for _, step := range steps {
		if step() != nil {
			return
		}
	}
}
