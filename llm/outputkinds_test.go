package llm

import (
	"io"
	"strings"
	"testing"
)

// Every kind of output a provider bills is metered as it streams: text,
// refusal, reasoning, tool and function arguments, custom tool input,
// audio; anything else in a delta by its bytes. Each case streams the
// same 200 words in one kind of delta.
func TestStreamMetersEveryOutputKind(t *testing.T) {
	word := "tenant"
	words := 200
	audio := strings.Repeat("AAAA", 25) // 75 bytes decoded
	tests := []struct {
		name  string
		kind  Kind
		event func() string
		want  int64 // at least
	}{
		{"chat content", ChatCompletions, func() string { return `data: {"choices":[{"index":0,"delta":{"content":" ` + word + `"}}]}` }, 200},
		{"chat refusal", ChatCompletions, func() string { return `data: {"choices":[{"index":0,"delta":{"refusal":" ` + word + `"}}]}` }, 200},
		{"chat reasoning_content", ChatCompletions, func() string {
			return `data: {"choices":[{"index":0,"delta":{"reasoning_content":" ` + word + `"}}]}`
		}, 200},
		{"chat legacy function_call", ChatCompletions, func() string {
			return `data: {"choices":[{"index":0,"delta":{"function_call":{"arguments":" ` + word + `"}}}]}`
		}, 200},
		{"chat tool call arguments", ChatCompletions, func() string {
			return `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" ` + word + `"}}]}}]}`
		}, 200},
		{"chat custom tool input", ChatCompletions, func() string {
			return `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"type":"custom","custom":{"input":" ` + word + `"}}]}}]}`
		}, 200},
		{"chat audio", ChatCompletions, func() string {
			return `data: {"choices":[{"index":0,"delta":{"audio":{"id":"a","data":"` + audio + `","transcript":" ` + word + `"}}}]}`
		}, 400},
		{"chat delta of tomorrow", ChatCompletions, func() string {
			return `data: {"choices":[{"index":0,"delta":{"hologram":"` + word + `"}}]}`
		}, 200 * int64(len(word)+2)},
		{"responses custom tool input", Responses, func() string {
			return `data: {"type":"response.custom_tool_call_input.delta","delta":" ` + word + `"}`
		}, 200},
		{"responses audio", Responses, func() string {
			return `data: {"type":"response.audio.delta","delta":"` + audio + `"}`
		}, 200},
		{"responses event of tomorrow", Responses, func() string {
			return `data: {"type":"response.hologram.delta","delta":"` + word + `"}`
		}, 200 * int64(len(word)+2)},
		{"anthropic thinking", AnthropicMessages, func() string {
			return `data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" ` + word + `"}}`
		}, 200},
		{"anthropic delta of tomorrow", AnthropicMessages, func() string {
			return `data: {"type":"content_block_delta","index":0,"delta":{"type":"hologram_delta","x":"` + word + `"}}`
		}, 200 * int64(len(word))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			for range words {
				b.WriteString(tt.event() + "\n\n")
			}
			for _, metered := range []bool{false, true} {
				cfg := StreamConfig{Kind: tt.kind, Model: "gpt-4o", AudioBytesPerToken: 100}
				if metered {
					cfg.Meter, cfg.Granted = grantAll{}, 1
				}
				w := NewStreamWatcher(strings.NewReader(b.String()), cfg)
				if _, err := io.Copy(io.Discard, w); err != nil {
					t.Fatal(err)
				}
				if got := w.Delivered(); got < tt.want {
					t.Errorf("delivered %d, want at least %d", got, tt.want)
				}
				if metered && w.Metered() < tt.want {
					t.Errorf("metered %d, want at least %d", w.Metered(), tt.want)
				}
			}
		})
	}
}

// grantAll grants whatever a stream asks.
type grantAll struct{}

func (grantAll) Extend(total int64) (int64, bool) { return total, true }

// An error event after content is told apart, on each API.
func TestStreamErrorEvent(t *testing.T) {
	for _, tt := range []struct {
		kind Kind
		ev   string
	}{
		{ChatCompletions, `data: {"error":{"message":"overloaded","type":"server_error"}}`},
		{Responses, `data: {"type":"error","code":"server_error","message":"x"}`},
		{Responses, `data: {"type":"response.failed","response":{"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0}}}`},
		{AnthropicMessages, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"x\"}}"},
	} {
		w := NewStreamWatcher(strings.NewReader(tt.ev+"\n\n"), StreamConfig{Kind: tt.kind, Model: "gpt-4o"})
		io.Copy(io.Discard, w)
		if !w.Failed() {
			t.Errorf("%s %s: not seen as an error", tt.kind, tt.ev)
		}
	}
}
