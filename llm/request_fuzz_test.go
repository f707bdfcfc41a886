package llm

import (
	"testing"
)

// Whatever the body, a parsed request's numbers are bounded (no cost
// wraps), and a body given its cap parses to a request that has it.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807}`,
		`{"model":"o3","messages":[],"n":128,"max_completion_tokens":100000}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x","detail":"low"}},{"type":"input_audio","input_audio":{"data":"AAAA"}}]}]}`,
		`{"model":"gpt-5","input":[{"type":"item_reference","id":"x"}],"previous_response_id":"r","max_tool_calls":3}`,
		`{"prompt":[[1,2],[3]],"best_of":5,"max_tokens":null}`,
		`{ }`, `{"max_tokens":-0}`, `{"n":1e400}`,
	} {
		for kind := ChatCompletions; kind <= AnthropicMessages; kind++ {
			f.Add(int(kind), []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, k int, body []byte) {
		kind := Kind(k%5 + 1)
		if k < 0 {
			kind = Kind(-k%5 + 1)
		}
		r, err := ParseRequest(kind, body)
		if err != nil {
			return
		}
		if r.PromptTokens < 0 || r.MaxOutput < 0 || r.Choices < 1 || r.Choices > MaxChoices {
			t.Fatalf("%s: got prompt %d, max output %d, choices %d", body, r.PromptTokens, r.MaxOutput, r.Choices)
		}
		if r.MaxOutput > MaxChoices*r.Family.MaxOutputTokens {
			t.Fatalf("%s: max output %d past %d choices of %d", body, r.MaxOutput, MaxChoices, r.Family.MaxOutputTokens)
		}
		if r.HasCap || r.CapField == "" {
			return
		}
		capped, err := WithOutputCap(body, r.CapField, 77)
		if err != nil {
			t.Fatalf("%s: WithOutputCap: %v", body, err)
		}
		again, err := ParseRequest(kind, capped)
		if err != nil {
			t.Fatalf("%s capped to %s: %v", body, capped, err)
		}
		if !again.HasCap || again.MaxOutput != 77*again.Choices || again.PromptTokens != r.PromptTokens {
			t.Fatalf("%s capped to %s: got %+v, want the cap 77 × %d and the same prompt", body, capped, again, again.Choices)
		}
	})
}
