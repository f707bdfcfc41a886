package llm

import (
	"bytes"
	"encoding/json"
	"strconv"
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
	// CacheWrite is the part of Input written to the prompt cache
	// (Anthropic's cache_creation_input_tokens); CacheWrite5m and
	// CacheWrite1h split it by the cache's ttl where the response does.
	CacheWrite, CacheWrite5m, CacheWrite1h int64
	// AudioInput is the part of Input that was audio; AudioOutput the part
	// of Output.
	AudioInput, AudioOutput int64
	// ServiceTier is the tier the response says it was served at, "" when
	// it says none.
	ServiceTier string
}

// wireUsage holds the usage fields of every shape: chat completions
// (prompt_/completion_tokens), responses (input_/output_tokens) and
// Anthropic (input_tokens excludes the cache; cache_* are separate).
type wireUsage struct {
	PromptTokens            int64             `json:"prompt_tokens"`
	CompletionTokens        int64             `json:"completion_tokens"`
	TotalTokens             int64             `json:"total_tokens"`
	PromptTokensDetails     *cachedDetails    `json:"prompt_tokens_details"`
	CompletionTokensDetails *reasoningDetails `json:"completion_tokens_details"`

	InputTokens         int64             `json:"input_tokens"`
	OutputTokens        int64             `json:"output_tokens"`
	InputTokensDetails  *cachedDetails    `json:"input_tokens_details"`
	OutputTokensDetails *reasoningDetails `json:"output_tokens_details"`

	CacheReadInputTokens     int64          `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64          `json:"cache_creation_input_tokens"`
	CacheCreation            *cacheCreation `json:"cache_creation"`
	// ServiceTier is Anthropic's, inside its usage; OpenAI's is beside the
	// usage (see ParseServiceTier).
	ServiceTier string `json:"service_tier"`
}

type cachedDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
	AudioTokens  int64 `json:"audio_tokens"`
}

type reasoningDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
	AudioTokens     int64 `json:"audio_tokens"`
}

// cacheCreation is Anthropic's split of cache writes by ttl.
type cacheCreation struct {
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
}

func (w *wireUsage) usage(kind Kind) Usage {
	var u Usage
	switch kind {
	case Responses, ImageGenerations, Transcription, ImageEdits, ImageVariations:
		u = Usage{Input: w.InputTokens, Output: w.OutputTokens, Total: w.TotalTokens}
		if d := w.InputTokensDetails; d != nil {
			u.CachedInput, u.AudioInput = d.CachedTokens, d.AudioTokens
		}
		if d := w.OutputTokensDetails; d != nil {
			u.Reasoning, u.AudioOutput = d.ReasoningTokens, d.AudioTokens
		}
	case AnthropicMessages:
		u = Usage{
			Input:       AddSat(max(w.InputTokens, 0), AddSat(max(w.CacheReadInputTokens, 0), max(w.CacheCreationInputTokens, 0))),
			CachedInput: w.CacheReadInputTokens,
			Output:      w.OutputTokens,
			CacheWrite:  w.CacheCreationInputTokens,
			ServiceTier: w.ServiceTier,
		}
		if c := w.CacheCreation; c != nil {
			u.CacheWrite5m, u.CacheWrite1h = c.Ephemeral5m, c.Ephemeral1h
		}
	default:
		u = Usage{Input: w.PromptTokens, Output: w.CompletionTokens, Total: w.TotalTokens}
		if d := w.PromptTokensDetails; d != nil {
			u.CachedInput, u.AudioInput = d.CachedTokens, d.AudioTokens
		}
		if d := w.CompletionTokensDetails; d != nil {
			u.Reasoning, u.AudioOutput = d.ReasoningTokens, d.AudioTokens
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
	w, tier, present, ok := usageMember(body)
	if !ok {
		var resp struct {
			Usage       *wireUsage `json:"usage"`
			ServiceTier *string    `json:"service_tier"`
		}
		if err := json.Unmarshal(body, &resp); err != nil || resp.Usage == nil {
			return Usage{}, false
		}
		u = resp.Usage.usage(kind)
		if resp.ServiceTier != nil && u.ServiceTier == "" {
			u.ServiceTier = *resp.ServiceTier
		}
		return u, true
	}
	if !present {
		return Usage{}, false
	}
	u = w.usage(kind)
	if u.ServiceTier == "" {
		u.ServiceTier = tier
	}
	return u, true
}

// usageMember decodes the usage of a valid JSON object as ParseUsage's
// json.Unmarshal does, decoding only the "usage" members (and the
// "service_tier" beside them, OpenAI's): a completion's text is skipped,
// not decoded. Member names match as encoding/json matches a field's,
// case folded; ok is false when a name is not plain ASCII (encoding/json
// folds some other letters too), a service_tier is not a plain string, or
// body is not a valid object, and ParseUsage then decodes it whole.
// present is false when there is no usage (or it is null, or not an
// object). The usage is a value, kept off the heap.
func usageMember(body []byte) (w wireUsage, tier string, present, ok bool) {
	open := skipSpace(body, 0)
	if open >= len(body) || body[open] != '{' {
		return wireUsage{}, "", false, false
	}
	var buf [16]member
	ms, valid := validMembers(body, buf[:0])
	if !valid {
		return wireUsage{}, "", false, false
	}
	for _, m := range ms {
		if !plainASCII(m.key) {
			return wireUsage{}, "", false, false
		}
		if bytes.EqualFold(m.key, serviceTierKey) {
			if !plainStringValue(body[m.val:m.end], &tier) {
				return wireUsage{}, "", false, false
			}
			continue
		}
		if !bytes.EqualFold(m.key, usageKey) {
			continue
		}
		v := body[m.val:m.end]
		switch v[0] {
		case 'n': // null
			w, present = wireUsage{}, false
			continue
		case '{':
		default:
			return wireUsage{}, "", false, true // not an object: json.Unmarshal fails
		}
		if !present {
			w, present = wireUsage{}, true
		}
		if w.decodePlain(v) {
			continue
		}
		// Into a copy on the heap: json.Unmarshal would move w there on
		// every call.
		slow := new(wireUsage)
		*slow = w
		if json.Unmarshal(v, slow) != nil {
			return wireUsage{}, "", false, true
		}
		w = *slow
	}
	return w, tier, present, true
}

var serviceTierKey = []byte("service_tier")

// decodePlain decodes the valid usage object v into w as json.Unmarshal
// does when every member is plain: a name in ASCII, an integer, null, or
// a details object of such members. It reports false, leaving w as it
// was, for anything else (a number int64 does not hold, a wrong type, a
// name json.Unmarshal might fold otherwise), which json.Unmarshal then
// decodes or refuses.
func (w *wireUsage) decodePlain(v []byte) bool {
	out := *w // w changes only when all of v is plain
	var buf [16]member
	for _, m := range appendMembers(buf[:0], v, 0) {
		if !plainASCII(m.key) {
			return false
		}
		// The name in lower case, looked up once: json.Unmarshal folds
		// case, and a plain ASCII name folds to its lower case. A name
		// longer than the buffer is none of these.
		var low [32]byte
		val, ok := v[m.val:m.end], true
		if len(m.key) > len(low) {
			continue
		}
		for i, c := range m.key {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			low[i] = c
		}
		switch string(low[:len(m.key)]) {
		case "prompt_tokens":
			ok = plainInt(val, &out.PromptTokens)
		case "completion_tokens":
			ok = plainInt(val, &out.CompletionTokens)
		case "total_tokens":
			ok = plainInt(val, &out.TotalTokens)
		case "input_tokens":
			ok = plainInt(val, &out.InputTokens)
		case "output_tokens":
			ok = plainInt(val, &out.OutputTokens)
		case "cache_read_input_tokens":
			ok = plainInt(val, &out.CacheReadInputTokens)
		case "cache_creation_input_tokens":
			ok = plainInt(val, &out.CacheCreationInputTokens)
		case "cache_creation":
			out.CacheCreation, ok = plainCacheCreation(val, out.CacheCreation)
		case "service_tier":
			ok = plainStringValue(val, &out.ServiceTier)
		case "prompt_tokens_details":
			out.PromptTokensDetails, ok = plainCached(val, out.PromptTokensDetails)
		case "input_tokens_details":
			out.InputTokensDetails, ok = plainCached(val, out.InputTokensDetails)
		case "completion_tokens_details":
			out.CompletionTokensDetails, ok = plainReasoning(val, out.CompletionTokensDetails)
		case "output_tokens_details":
			out.OutputTokensDetails, ok = plainReasoning(val, out.OutputTokensDetails)
		}
		if !ok {
			return false
		}
	}
	*w = out
	return true
}

// plainCached and plainReasoning decode a details object (or null) as
// decodePlain does, into a copy of was.
func plainCached(v []byte, was *cachedDetails) (*cachedDetails, bool) {
	if string(v) == "null" {
		return nil, true
	}
	d := new(cachedDetails)
	if was != nil {
		*d = *was
	}
	return d, plainDetail(v, detail{"cached_tokens", &d.CachedTokens}, detail{"audio_tokens", &d.AudioTokens})
}

func plainReasoning(v []byte, was *reasoningDetails) (*reasoningDetails, bool) {
	if string(v) == "null" {
		return nil, true
	}
	d := new(reasoningDetails)
	if was != nil {
		*d = *was
	}
	return d, plainDetail(v, detail{"reasoning_tokens", &d.ReasoningTokens}, detail{"audio_tokens", &d.AudioTokens})
}

func plainCacheCreation(v []byte, was *cacheCreation) (*cacheCreation, bool) {
	if string(v) == "null" {
		return nil, true
	}
	d := new(cacheCreation)
	if was != nil {
		*d = *was
	}
	return d, plainDetail(v, detail{"ephemeral_5m_input_tokens", &d.Ephemeral5m}, detail{"ephemeral_1h_input_tokens", &d.Ephemeral1h})
}

// detail is one integer member of a details object, and where it goes.
type detail struct {
	name string
	n    *int64
}

// plainDetail reads the members named by ds of the details object v.
func plainDetail(v []byte, ds ...detail) bool {
	if v[0] != '{' {
		return false
	}
	var buf [8]member
	for _, m := range appendMembers(buf[:0], v, 0) {
		if !plainASCII(m.key) {
			return false
		}
		for _, d := range ds {
			if bytes.EqualFold(m.key, []byte(d.name)) && !plainInt(v[m.val:m.end], d.n) {
				return false
			}
		}
	}
	return true
}

// plainStringValue stores the JSON string v, without escapes, in s (null
// leaves it), or reports false.
func plainStringValue(v []byte, s *string) bool {
	if string(v) == "null" {
		return true
	}
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		return false
	}
	*s = string(v[1 : len(v)-1])
	return true
}

// plainInt stores the integer v in n as json.Unmarshal would (null leaves
// it), or reports false (a fraction, an exponent, out of range, not a
// number).
func plainInt(v []byte, n *int64) bool {
	if string(v) == "null" {
		return true
	}
	x, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return false
	}
	*n = x
	return true
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
