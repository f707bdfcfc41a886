package llm

import (
	"strings"
	"testing"
)

// What a JSON answer shows is counted on every API, whatever its usage
// says: text, refusal, tool arguments, a custom tool's input, reasoning, a
// transcript, Anthropic's tool input.
func TestSeenOutput(t *testing.T) {
	w := strings.Repeat(" tenant", 50)
	for _, tt := range []struct {
		kind Kind
		body string
	}{
		{ChatCompletions, `{"choices":[{"index":0,"message":{"role":"assistant","content":"` + w + `"},"finish_reason":"stop"}],"usage":{"completion_tokens":1}}`},
		{ChatCompletions, `{"choices":[{"message":{"refusal":"` + w + `"}}]}`},
		{ChatCompletions, `{"choices":[{"message":{"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"` + w + `"}}]}}]}`},
		{ChatCompletions, `{"choices":[{"message":{"tool_calls":[{"type":"custom","custom":{"name":"f","input":"` + w + `"}}]}}]}`},
		{ChatCompletions, `{"choices":[{"message":{"audio":{"id":"a","data":"AAAA","transcript":"` + w + `"}}}]}`},
		{Completions, `{"choices":[{"text":"` + w + `"}]}`},
		{Responses, `{"output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"` + w + `"}]}]}`},
		{Responses, `{"output":[{"type":"custom_tool_call","input":"` + w + `"}]}`},
		{AnthropicMessages, `{"content":[{"type":"tool_use","id":"t","name":"f","input":{"q":"` + w + `"}}]}`},
	} {
		if got := SeenOutput(tt.kind, "gpt-4o", []byte(tt.body)); got < 50 {
			t.Errorf("%s %.60s…: seen %d, want at least 50", tt.kind, tt.body, got)
		}
	}
	if got := SeenOutput(ChatCompletions, "gpt-4o", []byte(`{"id":"`+w+`","choices":[{"finish_reason":"stop","message":{"role":"assistant"}}]}`)); got != 0 {
		t.Errorf("ids and roles: seen %d, want 0", got)
	}
}
