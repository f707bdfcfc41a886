package policies

import (
	"slices"

	"github.com/ratelimit-gateway/gateway/llm"
)

// ModelConfig is one entry of models: a family of models and the bounds the
// gateway reserves a call of them by. An entry named like a built-in family
// (gpt-4o-mini, gpt-4o, gpt-4.1-mini, gpt-5, o-series, claude, gpt-4,
// default)
// changes the fields it sets; any other name is a new family and needs
// prefixes. Zero fields keep the built-in value (or the default family's).
type ModelConfig struct {
	// Prefixes select the family's models by the start of their name.
	Prefixes []string `koanf:"prefixes"`
	// Reasoning: the chat output cap is max_completion_tokens.
	Reasoning *bool `koanf:"reasoning"`
	// DefaultMaxTokens is the cap given to a call that sets none.
	DefaultMaxTokens int64 `koanf:"default_max_tokens"`
	// MaxOutputTokens is the largest cap the provider accepts (400 beyond).
	MaxOutputTokens int64 `koanf:"max_output_tokens"`
	// ContextWindow bounds one turn's input: what an unsized input
	// reserves on a route with unsized_input: context_window.
	ContextWindow int64 `koanf:"context_window"`
	// ImageLow and ImageHigh bound one image at low and at high/auto detail.
	ImageLow  int64 `koanf:"image_low"`
	ImageHigh int64 `koanf:"image_high"`
	// AudioBytesPerToken sizes an input_audio part by its decoded bytes.
	AudioBytesPerToken int64 `koanf:"audio_bytes_per_token"`
	// FileTokens bounds one file part.
	FileTokens int64 `koanf:"file_tokens"`
}

func validateModels(p *problems, models map[string]ModelConfig) {
	builtin := map[string]bool{llm.DefaultFamily.Name: true}
	for _, f := range llm.DefaultModels() {
		builtin[f.Name] = true
	}
	for _, name := range sortedKeys(models) {
		mc, place := models[name], keyPlace("models", name)
		if !builtin[name] && len(mc.Prefixes) == 0 {
			p.add(place+".prefixes", "a family the gateway does not know needs prefixes (the start of its models' names)")
		}
		if name == llm.DefaultFamily.Name && len(mc.Prefixes) > 0 {
			p.add(place+".prefixes", "the default family applies to every model no other family names: it takes no prefixes")
		}
		for i, pre := range mc.Prefixes {
			if pre == "" {
				p.add(indexPlace(place+".prefixes", i), "must not be empty")
			}
		}
		for _, f := range []struct {
			key string
			v   int64
		}{
			{"default_max_tokens", mc.DefaultMaxTokens}, {"max_output_tokens", mc.MaxOutputTokens},
			{"context_window", mc.ContextWindow}, {"image_low", mc.ImageLow}, {"image_high", mc.ImageHigh},
			{"audio_bytes_per_token", mc.AudioBytesPerToken}, {"file_tokens", mc.FileTokens},
		} {
			if f.v < 0 {
				p.addf(place+"."+f.key, "must be > 0, got %d", f.v)
			}
		}
	}
}

// compileModels merges the file's models into the built-in families. The
// default family is kept last, without prefixes.
func compileModels(models map[string]ModelConfig) llm.Models {
	out := llm.DefaultModels()
	out = append(out, llm.DefaultFamily)
	for _, name := range sortedKeys(models) {
		mc := models[name]
		i := slices.IndexFunc(out, func(f llm.Family) bool { return f.Name == name })
		if i < 0 {
			base := llm.DefaultFamily
			base.Name = name
			out = append(out, base)
			i = len(out) - 1
		}
		f := &out[i]
		if len(mc.Prefixes) > 0 {
			f.Prefixes = slices.Clone(mc.Prefixes)
		}
		if mc.Reasoning != nil {
			f.Reasoning = *mc.Reasoning
		}
		set := func(dst *int64, v int64) {
			if v > 0 {
				*dst = v
			}
		}
		set(&f.DefaultMaxTokens, mc.DefaultMaxTokens)
		set(&f.MaxOutputTokens, mc.MaxOutputTokens)
		set(&f.ContextWindow, mc.ContextWindow)
		set(&f.ImageLow, mc.ImageLow)
		set(&f.ImageHigh, mc.ImageHigh)
		set(&f.AudioBytesPerToken, mc.AudioBytesPerToken)
		set(&f.FileTokens, mc.FileTokens)
	}
	return out
}
