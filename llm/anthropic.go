package llm

import (
	"encoding/json"
	"fmt"
)

// Claude's tokenizer is not public, so an Anthropic prompt is reserved by a
// bound from its bytes rather than a count: every token of a byte-level BPE
// vocabulary covers at least one byte, so a prompt's text has no more
// tokens than the bytes of the JSON body that carries it (keys, quotes and
// escapes only add bytes). What is not text is bounded by the model
// family's bound for it (Family.ImageHigh, Family.FileTokens). Every
// other value, a field Anthropic adds tomorrow, a member of a message no
// one reads, a tool's input, keeps its bytes in the bound; only the
// settings below are billed as nothing.
const (
	// anthropicToolPrompt bounds the system prompt Anthropic adds when a
	// request carries tools (its documentation lists 346 at most).
	anthropicToolPrompt = 500
	// anthropicFraming covers the turn markers around the conversation.
	anthropicFraming = 16
)

// anthropicControl says key is one of the top-level settings of a
// Messages request that Anthropic bills as nothing: they choose the model,
// cap or sample its output and pick the tier, and a value of the wrong
// type is refused. tool_choice and thinking stay in the bound: they change
// the system prompt Anthropic adds (thinking's budget_tokens bounds
// output, which max_tokens caps already). stop_sequences and metadata
// stay too, as on OpenAI: nothing documents them as free.
func anthropicControl(key []byte) bool {
	switch string(key) { // compared in place, not copied
	case "model", "max_tokens", "stream", "temperature", "top_p", "top_k", "service_tier":
		return true
	}
	return false
}

// AnthropicPrompt is what an Anthropic Messages request costs before its
// output, as far as the gateway can bound it.
type AnthropicPrompt struct {
	// Bound is at least the input tokens Anthropic can bill for the
	// request: its body's bytes, less its settings (anthropicControl) and
	// the base64 payloads of its images and binary documents, plus the
	// family's bound for each of them and anthropicToolPrompt with tools.
	Bound int64
	// Thinking is true when the request enables extended thinking: its
	// redacted blocks reach the client without text to count.
	Thinking bool
}

// ParseAnthropicPrompt bounds the prompt of an Anthropic Messages request
// body for a model of family f (see AnthropicPrompt), with saturating
// arithmetic. An error wraps ErrInvalidRequest. It is safe for concurrent
// use.
func ParseAnthropicPrompt(body []byte, f Family) (AnthropicPrompt, error) {
	if err := requireObject(body); err != nil {
		return AnthropicPrompt{}, invalid(AnthropicMessages, err)
	}
	var req struct {
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
		Tools    json.RawMessage   `json:"tools"`
		Thinking *struct {
			Type string `json:"type"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return AnthropicPrompt{}, invalid(AnthropicMessages, err)
	}
	p := AnthropicPrompt{Bound: int64(len(body)) + anthropicFraming}
	// The body is a valid object: its members are listed without a second
	// validation, keys matched exactly as Anthropic matches them.
	var buf [16]member
	for _, m := range appendMembers(buf[:0], body, skipSpace(body, 0)) {
		if anthropicControl(m.key) {
			p.Bound -= memberBytes(m) // never more than the member's own bytes
		}
	}
	p.Thinking = req.Thinking != nil && req.Thinking.Type != "" && req.Thinking.Type != "disabled"
	if len(req.Tools) > 0 && string(req.Tools) != "null" && string(req.Tools) != "[]" {
		p.Bound += anthropicToolPrompt
	}
	// An image or a binary document is billed by its family's bound only
	// where it is a content block: of a message, of the system prompt, or
	// of a tool result's content. Anywhere else (a tool's input, say) an
	// object typed "image" is text, bounded by its bytes like the rest.
	var blocks func(v any)
	blocks = func(v any) {
		list, _ := v.([]any)
		for _, e := range list {
			x, _ := e.(map[string]any)
			typ, _ := x["type"].(string)
			src, _ := x["source"].(map[string]any)
			part := int64(0)
			switch st, _ := src["type"].(string); {
			case typ == "image":
				part = f.ImageHigh
			case typ == "document" && st != "text" && st != "content":
				// A PDF's pages are billed as images and as text that
				// compression hides: its bytes bound nothing.
				part = f.FileTokens
			case typ == "tool_result":
				blocks(x["content"])
			}
			if part > 0 {
				p.Bound = AddSat(p.Bound, part)
				if data, ok := src["data"].(string); ok {
					p.Bound -= int64(len(data)) // bytes the part's bound replaces
				}
			}
		}
	}
	for i, m := range req.Messages {
		var v struct {
			Content any `json:"content"`
		}
		if err := json.Unmarshal(m, &v); err != nil {
			return AnthropicPrompt{}, invalid(AnthropicMessages, fmt.Errorf("messages[%d]: %w", i, err))
		}
		blocks(v.Content)
	}
	if len(req.System) > 0 {
		var v any
		if err := json.Unmarshal(req.System, &v); err != nil {
			return AnthropicPrompt{}, invalid(AnthropicMessages, fmt.Errorf("system: %w", err))
		}
		blocks(v)
	}
	p.Bound = max(p.Bound, 1)
	return p, nil
}
