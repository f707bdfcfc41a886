package llm

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Usage is the token usage a provider reports for one response.
type Usage struct {
	// Input is every prompt token, cached ones included.
	Input int64
	// CachedInput is the part of Input served from the provider's prompt
	// cache (usually priced lower).
	CachedInput int64
	// Output is every generated token, reasoning ones included.
	Output int64
	// Reasoning is the part of Output spent on hidden reasoning.
	Reasoning int64
	// Total is the provider's total, or Input+Output when it sends none.
	Total int64
}

// wireUsage holds the usage fields of every shape: chat completions
// (prompt_/completion_tokens), responses (input_/output_tokens) and
// Anthropic (input_tokens excludes the cache; cache_* are separate).
type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`

	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`

	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

func (w *wireUsage) usage(kind Kind) Usage {
	var u Usage
	switch kind {
	case Responses:
		u = Usage{Input: w.InputTokens, Output: w.OutputTokens, Total: w.TotalTokens}
		if d := w.InputTokensDetails; d != nil {
			u.CachedInput = d.CachedTokens
		}
		if d := w.OutputTokensDetails; d != nil {
			u.Reasoning = d.ReasoningTokens
		}
	case AnthropicMessages:
		u = Usage{
			Input:       w.InputTokens + w.CacheReadInputTokens + w.CacheCreationInputTokens,
			CachedInput: w.CacheReadInputTokens,
			Output:      w.OutputTokens,
		}
	default:
		u = Usage{Input: w.PromptTokens, Output: w.CompletionTokens, Total: w.TotalTokens}
		if d := w.PromptTokensDetails; d != nil {
			u.CachedInput = d.CachedTokens
		}
		if d := w.CompletionTokensDetails; d != nil {
			u.Reasoning = d.ReasoningTokens
		}
	}
	if u.Total == 0 {
		u.Total = u.Input + u.Output
	}
	return u
}

// ParseUsage reads the usage from a JSON (not streamed) response of the
// given kind: the top-level "usage" object, in the chat completions shape
// (also completions and embeddings), the responses shape or Anthropic's. ok
// is false when the body is not JSON, has no usage, or its usage has fields
// of the wrong type: the caller then keeps its estimate. It is safe for
// concurrent use.
func ParseUsage(kind Kind, body []byte) (u Usage, ok bool) {
	w, ok := usageMember(body)
	if !ok {
		var resp struct {
			Usage *wireUsage `json:"usage"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			return Usage{}, false
		}
		w = resp.Usage
	}
	if w == nil {
		return Usage{}, false
	}
	return w.usage(kind), true
}

// usageMember decodes the usage of a valid JSON object as ParseUsage's
// json.Unmarshal does, decoding only the "usage" members: a completion's
// text is skipped, not decoded. Member names match as encoding/json
// matches a field's, case folded; ok is false when a name is not plain
// ASCII (encoding/json folds some other letters too) or body is not a
// valid object, and ParseUsage then decodes it whole.
func usageMember(body []byte) (w *wireUsage, ok bool) {
	open := skipSpace(body, 0)
	if open >= len(body) || body[open] != '{' || !json.Valid(body) {
		return nil, false
	}
	var buf [16]member
	for _, m := range appendMembers(buf[:0], body, open) {
		if !plainASCII(m.key) {
			return nil, false
		}
		if !bytes.EqualFold(m.key, usageKey) {
			continue
		}
		v := body[m.val:m.end]
		switch v[0] {
		case 'n': // null
			w = nil
			continue
		case '{':
		default:
			return nil, true // not an object: json.Unmarshal fails
		}
		if w == nil {
			w = new(wireUsage)
		}
		if json.Unmarshal(v, w) != nil {
			return nil, true
		}
	}
	return w, true
}

var usageKey = []byte("usage")

func plainASCII(s []byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
