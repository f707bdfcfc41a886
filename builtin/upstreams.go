package builtin

import (
	"net/http"

	"github.com/ratelimit-gateway/gateway/llm"
)

// upstreams are the built-in upstreams the gateway ships, by the name a
// route's "builtin:NAME" upstream gives, in the order error messages list
// them. The config resolves names against it and the server starts its
// handlers: one list for both.
var upstreams = []struct {
	name string
	new  func() http.Handler
}{
	{"echo", Echo},
	// Long enough completions, streamed fast, that the README tour can
	// watch a free tenant use its tokens up in a few calls; prompts counted
	// with the model's real vocabulary, as the provider bills them.
	{"openai-mock", func() http.Handler {
		return OpenAIMock(OpenAIMockConfig{CompletionTokens: 200, TokensPerSecond: 1000,
			CountTokens: func(model, text string) int { return int(llm.CountTokens(model, text)) }})
	}},
	{"anthropic-mock", func() http.Handler {
		return NewAnthropicMock(AnthropicMockConfig{CompletionTokens: 200, TokensPerSecond: 1000})
	}},
}

// Names returns the names of the built-in upstreams the gateway ships.
func Names() []string {
	names := make([]string, len(upstreams))
	for i, u := range upstreams {
		names[i] = u.name
	}
	return names
}

// Upstreams returns a fresh handler for each built-in upstream, by name.
func Upstreams() map[string]http.Handler {
	m := make(map[string]http.Handler, len(upstreams))
	for _, u := range upstreams {
		m[u.name] = u.new()
	}
	return m
}
