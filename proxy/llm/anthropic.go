package llm

import (
	"encoding/json"
	"fmt"
)

// Claude's tokenizer is not public, so an Anthropic prompt is reserved by a
// bound from its bytes rather than a count: every token of a byte-level BPE
// vocabulary covers at least one byte, so a prompt has no more tokens than
// the bytes of its JSON body (keys, quotes and escapes only add bytes).
// What is not text is bounded by what Anthropic documents for it.
const (
	// anthropicImageTokens bounds one image: Anthropic charges about
	// width×height/750 tokens and scales an image down until its long edge
	// is at most 1568 px and it has at most about 1.15 megapixels, which
	// costs at most about 1,600 tokens.
	anthropicImageTokens = 1600
	// anthropicToolPrompt bounds the system prompt Anthropic adds when a
	// request carries tools (its documentation lists 346 at most).
	anthropicToolPrompt = 500
	// anthropicFraming covers the turn markers around the conversation.
	anthropicFraming = 16
)

// AnthropicPrompt is what an Anthropic Messages request costs before its
// output, as far as the gateway can bound it.
type AnthropicPrompt struct {
	// Bound is at least the input tokens Anthropic can bill for the
	// request: its body's bytes, less the base64 of its images, plus
	// anthropicImageTokens per image and anthropicToolPrompt with tools.
	Bound int64
	// Thinking is true when the request enables extended thinking: its
	// redacted blocks reach the client without text to count.
	Thinking bool
	// Unbounded, when not empty, names a part whose tokens the bytes do not
	// bound (a PDF document: its pages are billed as images and text that
	// compression hides): a route that counts tokens refuses the request.
	Unbounded string
}

// ParseAnthropicPrompt bounds the prompt of an Anthropic Messages request
// body (see AnthropicPrompt). An error wraps ErrInvalidRequest. It is safe
// for concurrent use.
func ParseAnthropicPrompt(body []byte) (AnthropicPrompt, error) {
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
	p.Thinking = req.Thinking != nil && req.Thinking.Type != "" && req.Thinking.Type != "disabled"
	if len(req.Tools) > 0 && string(req.Tools) != "null" && string(req.Tools) != "[]" {
		p.Bound += anthropicToolPrompt
	}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case []any:
			for i, e := range x {
				walk(e, fmt.Sprintf("%s[%d]", path, i))
			}
		case map[string]any:
			typ, _ := x["type"].(string)
			src, _ := x["source"].(map[string]any)
			switch {
			case typ == "image":
				p.Bound += anthropicImageTokens
				if data, ok := src["data"].(string); ok {
					p.Bound -= int64(len(data)) // bytes the image bound replaces
				}
				return
			case typ == "document" && src != nil:
				switch st, _ := src["type"].(string); st {
				case "text", "content":
					// Text is bounded by its bytes, already counted.
				default:
					if p.Unbounded == "" {
						p.Unbounded = fmt.Sprintf("%s: a %s document", path, docKind(src))
					}
				}
			}
			for k, e := range x {
				walk(e, path+"."+k)
			}
		}
	}
	for i, m := range req.Messages {
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			return AnthropicPrompt{}, invalid(AnthropicMessages, fmt.Errorf("messages[%d]: %w", i, err))
		}
		walk(v, fmt.Sprintf("messages[%d]", i))
	}
	if len(req.System) > 0 {
		var v any
		if err := json.Unmarshal(req.System, &v); err != nil {
			return AnthropicPrompt{}, invalid(AnthropicMessages, fmt.Errorf("system: %w", err))
		}
		walk(v, "system")
	}
	p.Bound = max(p.Bound, 1)
	return p, nil
}

func docKind(src map[string]any) string {
	if mt, ok := src["media_type"].(string); ok && mt != "" {
		return mt
	}
	if st, ok := src["type"].(string); ok && st != "" {
		return st + " source"
	}
	return "binary"
}
