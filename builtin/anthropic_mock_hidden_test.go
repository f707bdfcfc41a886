package builtin

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// The Anthropic mock bills what a request hides outside the fields it
// reads at a token a byte, a tool's input as text whatever its shape, and
// says so in its usage.
func TestAnthropicMockBillsHiddenFields(t *testing.T) {
	m := NewAnthropicMock(AnthropicMockConfig{CompletionTokens: 5})
	srv := httptest.NewServer(m)
	defer srv.Close()
	hidden := strings.Repeat("word ", 100) // 500 bytes
	msg := `"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct {
		name string
		body string
		// hidden is the bytes billed a token each.
		hidden int
	}{
		{"nothing hidden", `{"model":"c","max_tokens":5,"temperature":1,"metadata":{"user_id":"u"},` + msg + `}`, 0},
		{"a field of tomorrow", `{"model":"c","max_tokens":5,"tomorrow":["` + hidden + `"],` + msg + `}`, len(`tomorrow["` + hidden + `"]`)},
		{"a member of a message", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi","notes":"` + hidden + `"}]}`, len(`notes"` + hidden + `"`)},
		{"an image typed object in a tool's input", `{"model":"c","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":` +
			`{"type":"image","source":{"data":"` + hidden + `"}}}]}]}`, len(`{"type":"image","source":{"data":"` + hidden + `"}}`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := m.Bill()
			resp := anthropicPost(t, srv.URL, tt.body, anthropicHeaders)
			var got struct {
				Usage map[string]int
			}
			json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			want := (len(tt.body)-tt.hidden+3)/4 + tt.hidden
			after := m.Bill()
			if got.Usage["input_tokens"] != want || after.Input-before.Input != int64(want) || after.Calls-before.Calls != 1 || after.Output-before.Output != 5 {
				t.Fatalf("usage %v, billed %+v after %+v; want %d input tokens and 5 output in one call", got.Usage, after, before, want)
			}
		})
	}
}
