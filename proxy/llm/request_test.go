package llm

import (
	"errors"
	"strings"
	"testing"
)

// cookbookMessages are the example messages of OpenAI's cookbook "How to
// count tokens with tiktoken", which prints 129 prompt tokens for
// gpt-3.5-turbo-0613 and gpt-4-0613 and 124 for gpt-4o and gpt-4o-mini, as
// the API reported them.
const cookbookMessages = `[
 {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
 {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
 {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
 {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
 {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
 {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."}
]`

func TestParseRequest(t *testing.T) {
	hello := CountTokens("gpt-4o", "Hello")
	tests := []struct {
		name string
		kind Kind
		body string
		want Request
	}{
		{"cookbook gpt-4", ChatCompletions, `{"model":"gpt-4-0613","messages":` + cookbookMessages + `}`,
			Request{Model: "gpt-4-0613", PromptTokens: 129, Choices: 1}},
		{"cookbook gpt-3.5", ChatCompletions, `{"model":"gpt-3.5-turbo-0613","messages":` + cookbookMessages + `}`,
			Request{Model: "gpt-3.5-turbo-0613", PromptTokens: 129, Choices: 1}},
		{"cookbook gpt-4o", ChatCompletions, `{"model":"gpt-4o","messages":` + cookbookMessages + `}`,
			Request{Model: "gpt-4o", PromptTokens: 124, Choices: 1}},
		{"cookbook gpt-4o-mini", ChatCompletions, `{"model":"gpt-4o-mini","messages":` + cookbookMessages + `}`,
			Request{Model: "gpt-4o-mini", PromptTokens: 124, Choices: 1}},
		{"chat stream with usage", ChatCompletions,
			`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`,
			Request{Model: "gpt-4o", Stream: true, IncludeUsage: true, MaxOutput: 100, PromptTokens: 3 + 1 + hello + 3, Choices: 1}},
		{"max_completion_tokens wins", ChatCompletions,
			`{"model":"o3","max_tokens":100,"max_completion_tokens":700,"messages":[]}`,
			Request{Model: "o3", MaxOutput: 700, PromptTokens: 3, Choices: 1}},
		{"n multiplies the cap", ChatCompletions, `{"model":"gpt-4o","max_tokens":50,"n":3,"messages":[]}`,
			Request{Model: "gpt-4o", MaxOutput: 150, PromptTokens: 3, Choices: 3}},
		{"nulls are absent", ChatCompletions,
			`{"model":"gpt-4o","stream":null,"stream_options":null,"max_tokens":null,"messages":[{"role":"user","content":null}]}`,
			Request{Model: "gpt-4o", PromptTokens: 3 + 1 + 3, Choices: 1}},
		{"content parts", ChatCompletions,
			`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hello"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`,
			Request{Model: "gpt-4o", PromptTokens: 3 + 1 + hello + 85 + 3, Choices: 1}},
		{"tool calls and tools", ChatCompletions,
			`{"model":"gpt-4o","tools":[{"type":"function"}],"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"Hello","arguments":"Hello"}}]}]}`,
			Request{Model: "gpt-4o", PromptTokens: 3 + CountTokens("gpt-4o", "assistant") + 2*hello + CountTokens("gpt-4o", `[{"type":"function"}]`) + 3, Choices: 1}},
		{"completions string", Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":"Hello","max_tokens":16}`,
			Request{Model: "gpt-3.5-turbo-instruct", MaxOutput: 16, PromptTokens: CountTokens("gpt-3.5", "Hello"), Choices: 1}},
		{"best_of is generated and billed", Completions, `{"model":"x","prompt":"","max_tokens":10,"n":2,"best_of":5}`,
			Request{Model: "x", MaxOutput: 50, Choices: 5}},
		{"n without a cap", ChatCompletions, `{"model":"x","n":4,"messages":[]}`,
			Request{Model: "x", PromptTokens: 3, Choices: 4}},
		{"completions token ids", Completions, `{"model":"x","prompt":[[1,2,3],[4]],"stream":true}`,
			Request{Model: "x", Stream: true, PromptTokens: 4, Choices: 1}},
		{"responses string input", Responses,
			`{"model":"gpt-4.1","instructions":"Hello","input":"Hello","max_output_tokens":300,"stream":true}`,
			Request{Model: "gpt-4.1", Stream: true, MaxOutput: 300,
				PromptTokens: 3 + CountTokens("gpt-4o", "developer") + hello + 3 + 1 + hello + 3, Choices: 1}},
		{"responses items", Responses,
			`{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"Hello"},{"type":"input_image","image_url":"https://x"}]},{"type":"function_call_output","call_id":"c","output":"Hello"}]}`,
			Request{Model: "gpt-4.1", PromptTokens: 3 + 1 + hello + 85 + hello + 3, Choices: 1}},
		{"embeddings strings", Embeddings, `{"model":"text-embedding-3-small","input":["Hello","Hello"]}`,
			Request{Model: "text-embedding-3-small", PromptTokens: 2 * CountTokens("gpt-4", "Hello"), Choices: 1}},
		{"embeddings ids", Embeddings, `{"model":"text-embedding-3-small","input":[1,2,3]}`,
			Request{Model: "text-embedding-3-small", PromptTokens: 3, Choices: 1}},
		{"anthropic", AnthropicMessages,
			`{"model":"claude-sonnet-4","max_tokens":1024,"system":"Hello","messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}],"stream":true}`,
			Request{Model: "claude-sonnet-4", Stream: true, MaxOutput: 1024,
				PromptTokens: 3 + CountTokens("x", "system") + hello + 3 + 1 + hello + 3, Choices: 1}},
		{"keys are case-sensitive", ChatCompletions,
			`{"model":"gpt-4o","max_tokens":4000,"MAX_TOKENS":1,"Stream":true,"messages":[]}`,
			Request{Model: "gpt-4o", MaxOutput: 4000, PromptTokens: 3, Choices: 1}},
		{"last duplicate wins", ChatCompletions, `{"model":"a","max_tokens":1,"max_tokens":9,"messages":[]}`,
			Request{Model: "a", MaxOutput: 9, PromptTokens: 3, Choices: 1}},
		{"no model", ChatCompletions, `{"messages":[]}`, Request{PromptTokens: 3, Choices: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest(tt.kind, []byte(tt.body))
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		body string
		want string // in the error's text
	}{
		{"empty", ChatCompletions, ``, "empty body"},
		{"not json", ChatCompletions, `{"model":`, "unexpected end of JSON"},
		{"garbage", ChatCompletions, `hello`, "not valid JSON"},
		{"null", ChatCompletions, `null`, "must be a JSON object"},
		{"array", ChatCompletions, `[]`, "must be a JSON object"},
		{"trailing garbage", ChatCompletions, `{} x`, "invalid character"},
		{"model number", ChatCompletions, `{"model":4}`, "model"},
		{"stream string", ChatCompletions, `{"stream":"true"}`, "stream"},
		{"include_usage string", ChatCompletions, `{"stream_options":{"include_usage":"yes"}}`, "include_usage"},
		{"max_tokens string", ChatCompletions, `{"max_tokens":"100"}`, "max_tokens"},
		{"max_tokens fraction", ChatCompletions, `{"max_tokens":1.5}`, "max_tokens"},
		{"max_tokens negative", ChatCompletions, `{"max_tokens":-1}`, "max_tokens must be >= 0"},
		{"n zero", ChatCompletions, `{"n":0}`, "n must be between"},
		{"best_of too big", Completions, `{"max_tokens":1,"best_of":1000}`, "best_of must be between"},
		{"messages object", ChatCompletions, `{"messages":{}}`, "messages must be an array"},
		{"message string", ChatCompletions, `{"messages":["hi"]}`, "messages[0] must be an object"},
		{"role number", ChatCompletions, `{"messages":[{"role":1}]}`, "messages[0].role must be a string"},
		{"content number", ChatCompletions, `{"messages":[{"role":"user","content":1}]}`, "messages[0].content must be"},
		{"instructions array", Responses, `{"instructions":[]}`, "instructions must be a string"},
		{"input number", Responses, `{"input":3}`, "input must be an array"},
		{"prompt object", Completions, `{"prompt":{}}`, "prompt must be a string or an array"},
		{"input bool item", Embeddings, `{"input":[true]}`, "input[0] must be"},
		{"input nested strings", Embeddings, `{"input":[["a"]]}`, "input[0] must be an array of token ids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequest(tt.kind, []byte(tt.body))
			if err == nil {
				t.Fatalf("got no error, want one containing %q", tt.want)
			}
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("got %v, want it to wrap ErrInvalidRequest", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := ParseRequest(Kind(0), []byte(`{}`)); err == nil {
		t.Error("ParseRequest(Kind(0)): got no error, want one")
	}
}
