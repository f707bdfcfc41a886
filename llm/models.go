package llm

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Family is what the gateway knows of a group of models to bound what a
// call can be billed. Its numbers are upper bounds: a call is reserved at
// least what the provider may bill it, never less.
type Family struct {
	// Name is the family's name in the table (for logs and explain).
	Name string
	// Prefixes select the family's models by the start of their name (after
	// a provider prefix such as "openai/" and a fine-tune's "ft:"); the
	// longest matching prefix across the table wins.
	Prefixes []string
	// Reasoning models think before they answer; on chat completions their
	// output cap is max_completion_tokens (they refuse max_tokens).
	Reasoning bool
	// DefaultMaxTokens is the output cap given to a call that sets none:
	// the gateway writes it into the forwarded body and reserves it.
	DefaultMaxTokens int64
	// MaxOutputTokens is the largest output cap the provider accepts for
	// one choice; a larger one is refused with 400, as the provider does.
	MaxOutputTokens int64
	// ContextWindow bounds what one model turn can bill as input: the bound
	// of inputs the gateway cannot size, when a route opts for it.
	ContextWindow int64
	// ImageLow bounds one image at "detail": "low"; ImageHigh one image at
	// "high" or "auto" (or no detail), whatever its size.
	ImageLow, ImageHigh int64
	// AudioBytesPerToken sizes an input_audio part: its decoded bytes
	// divided by this, rounded up.
	AudioBytesPerToken int64
	// FileTokens bounds one file part (inline, by URL or by file_id).
	FileTokens int64
}

// Models is a table of model families. The zero value is DefaultModels.
type Models []Family

// The built-in families. Image bounds follow OpenAI's published formulas:
// tile models scale an image to fit 2048×2048, then its shortest side to
// 768 px, and bill base + tile × 512-px tiles, at most 2 × 4 = 8 tiles
// (low detail is the base alone); patch models bill 32-px patches, at most
// 1536, times a multiplier, whatever the detail. Audio is billed 10 tokens
// a second, and no codec the providers take stores a second in less than
// 1,000 bytes (8 kbit/s). A file part is bounded by the context window.
var builtinModels = Models{
	// gpt-4o-mini scales its image tokens up: base 2,833, tile 5,667.
	{Name: "gpt-4o-mini", Prefixes: []string{"gpt-4o-mini"}, DefaultMaxTokens: 4096, MaxOutputTokens: 16384, ContextWindow: 128_000,
		ImageLow: 2833, ImageHigh: 2833 + 8*5667, AudioBytesPerToken: 100, FileTokens: 128_000},
	// gpt-4o, gpt-4-turbo, gpt-4.1, gpt-4.5: base 85, tile 170.
	{Name: "gpt-4o", Prefixes: []string{"gpt-4o", "chatgpt-4o", "gpt-4-turbo", "gpt-4.5", "gpt-4.1"}, DefaultMaxTokens: 4096, MaxOutputTokens: 32768, ContextWindow: 1_047_576,
		ImageLow: 85, ImageHigh: 85 + 8*170, AudioBytesPerToken: 100, FileTokens: 128_000},
	// gpt-4.1-mini and -nano are patch models: 1536 patches × 1.62 / 2.46.
	{Name: "gpt-4.1-mini", Prefixes: []string{"gpt-4.1-mini", "gpt-4.1-nano", "gpt-5-mini", "gpt-5-nano"}, DefaultMaxTokens: 4096, MaxOutputTokens: 128_000, ContextWindow: 1_047_576,
		ImageLow: 3779, ImageHigh: 3779, AudioBytesPerToken: 100, FileTokens: 128_000},
	// gpt-5: base 70, tile 140; reasons before it answers.
	{Name: "gpt-5", Prefixes: []string{"gpt-5"}, Reasoning: true, DefaultMaxTokens: 25_000, MaxOutputTokens: 128_000, ContextWindow: 400_000,
		ImageLow: 70, ImageHigh: 70 + 8*140, AudioBytesPerToken: 100, FileTokens: 128_000},
	// o1, o3: base 75, tile 150; o4-mini is a patch model (× 1.72).
	{Name: "o-series", Prefixes: []string{"o1", "o3", "o4"}, Reasoning: true, DefaultMaxTokens: 25_000, MaxOutputTokens: 100_000, ContextWindow: 200_000,
		ImageLow: 2642, ImageHigh: 2642, AudioBytesPerToken: 100, FileTokens: 128_000},
	// Claude: an image is scaled to at most about 1.15 megapixels, billed
	// width × height / 750 tokens (at most about 1,600); its context window
	// bounds a document.
	{Name: "claude", Prefixes: []string{"claude"}, DefaultMaxTokens: 8192, MaxOutputTokens: 128_000, ContextWindow: 200_000,
		ImageLow: 1600, ImageHigh: 1600, AudioBytesPerToken: 100, FileTokens: 200_000},
	// gpt-3.5 and gpt-4 take no images; bounded as gpt-4o.
	{Name: "gpt-4", Prefixes: []string{"gpt-4", "gpt-3.5", "gpt-35"}, DefaultMaxTokens: 4096, MaxOutputTokens: 16384, ContextWindow: 128_000,
		ImageLow: 85, ImageHigh: 85 + 8*170, AudioBytesPerToken: 100, FileTokens: 128_000},
}

// DefaultFamily bounds models no family names: the largest image bound of
// the table (gpt-4o-mini's), a reasoning-sized default cap.
var DefaultFamily = Family{Name: "default", DefaultMaxTokens: 25_000, MaxOutputTokens: 131_072, ContextWindow: 128_000,
	ImageLow: 2833, ImageHigh: 2833 + 8*5667, AudioBytesPerToken: 100, FileTokens: 128_000}

// DefaultModels returns a copy of the built-in families.
func DefaultModels() Models {
	out := make(Models, len(builtinModels))
	copy(out, builtinModels)
	return out
}

// For returns the family of model: the one with the longest prefix of its
// name, DefaultFamily when none matches. A nil or empty table is the
// built-in one.
func (m Models) For(model string) Family {
	if len(m) == 0 {
		m = builtinModels
	}
	name := strings.ToLower(strings.TrimPrefix(model, "ft:"))
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	best, bestLen := -1, 0
	for i, f := range m {
		for _, p := range f.Prefixes {
			if len(p) > bestLen && hasLowerPrefix(name, p) {
				best, bestLen = i, len(p)
			}
		}
	}
	if best < 0 {
		for _, f := range m {
			if f.Name == DefaultFamily.Name && len(f.Prefixes) == 0 {
				return f
			}
		}
		return DefaultFamily
	}
	return m[best]
}

// hasLowerPrefix is strings.HasPrefix(name, strings.ToLower(p)), without
// lowering p first where it is ASCII: byte by byte, to the first that
// differs.
func hasLowerPrefix(name, p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c >= utf8.RuneSelf { // lowered, it may change its length
			return strings.HasPrefix(name, strings.ToLower(p))
		}
		if i >= len(name) {
			return false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if name[i] != c {
			return false
		}
	}
	return true
}

// AddSat returns a+b, or math.MaxInt64 when the sum would not fit; both
// must be >= 0. Costs are sums of client-chosen numbers: saturating keeps
// a huge one a huge cost instead of a negative one.
func AddSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// MulSat returns a×b, or math.MaxInt64 when the product would not fit;
// both must be >= 0.
func MulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
