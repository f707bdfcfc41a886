package policies

import (
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/llm"
)

// enforce and stream_window are checked, each mistake named by its place.
func TestEnforceValidation(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"llm kind", withRoute(`{name: r, upstream: builtin:echo, llm: gemini}`),
			`gateway.yaml: routes[0].llm: must be ` + llm.ProviderNames() + `, got "gemini"`},
		{"enforce value", withRoute(`{name: r, upstream: builtin:echo, llm: openai, enforce: tokens}`),
			`gateway.yaml: routes[0].enforce: must be reserve or stream, got "tokens"`},
		{"enforce off llm", withRoute(`{name: r, upstream: builtin:echo, enforce: stream}`),
			"gateway.yaml: routes[0].enforce: applies to llm routes only (set llm: openai or llm: anthropic)"},
		{"unsized_input value", withRoute(`{name: r, upstream: builtin:echo, llm: openai, unsized_input: guess}`),
			`gateway.yaml: routes[0].unsized_input: must be refuse or context_window, got "guess"`},
		{"unsized_input off llm", withRoute(`{name: r, upstream: builtin:echo, unsized_input: refuse}`),
			"gateway.yaml: routes[0].unsized_input: applies to llm routes only (set llm: openai)"},
		{"window without stream", withRoute(`{name: r, upstream: builtin:echo, llm: openai, stream_window: 64}`),
			"gateway.yaml: routes[0].stream_window: applies with enforce: stream only"},
		{"window negative", withRoute(`{name: r, upstream: builtin:echo, llm: openai, enforce: stream, stream_window: -1}`),
			"gateway.yaml: routes[0].stream_window: must be between 1 and 1048576, got -1"},
		{"window huge", withRoute(`{name: r, upstream: builtin:echo, llm: anthropic, enforce: stream, stream_window: 9223372036854775807}`),
			"gateway.yaml: routes[0].stream_window: must be between 1 and 1048576, got 9223372036854775807"},
		{"error format", withRoute(`{name: r, upstream: builtin:echo, llm: anthropic, error_format: xml}`),
			`gateway.yaml: routes[0].error_format: must be gateway, ` + strings.ReplaceAll(llm.ProviderNames(), " or ", ", ") + ` or grpc, got "xml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(tc.yaml), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
}

// An enforce: stream route compiles with its window (256 by default); an
// anthropic route speaks Anthropic's errors unless told otherwise.
func TestEnforceCompiles(t *testing.T) {
	snap, err := Parse("gateway.yaml", []byte(`
routes:
  - {name: a, upstream: builtin:echo, llm: openai, enforce: stream, match: {path_prefix: /a}}
  - {name: b, upstream: builtin:echo, llm: anthropic, enforce: stream, stream_window: 64, match: {path_prefix: /b}}
  - {name: c, upstream: builtin:echo, llm: anthropic, error_format: gateway, match: {path_prefix: /c}}
  - {name: d, upstream: builtin:echo, llm: openai}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Routes
	if r[0].StreamWindow != DefaultStreamWindow || r[1].StreamWindow != 64 || r[2].StreamWindow != 0 || r[3].StreamWindow != 0 {
		t.Fatalf("windows %d %d %d %d, want %d 64 0 0", r[0].StreamWindow, r[1].StreamWindow, r[2].StreamWindow, r[3].StreamWindow, DefaultStreamWindow)
	}
	if r[1].Provider != llm.AnthropicProvider || r[1].ErrorShape != llm.AnthropicProvider || r[2].Provider != llm.AnthropicProvider || r[2].ErrorShape != nil || r[0].Provider != llm.OpenAIProvider {
		t.Fatalf("providers %v/%v/%v, errors %v/%v: want routes b and c anthropic, b in its error shape", r[0].Provider, r[1].Provider, r[2].Provider, r[1].ErrorShape, r[2].ErrorShape)
	}
}
