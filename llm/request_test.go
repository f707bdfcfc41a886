package llm

import (
	"errors"
	"reflect"
	"strconv"
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
		{"the larger cap wins", ChatCompletions,
			`{"model":"o3","max_tokens":100,"max_completion_tokens":700,"messages":[]}`,
			Request{Model: "o3", MaxOutput: 700, OtherCap: "max_tokens", PromptTokens: 3, Choices: 1}},
		{"n multiplies the cap", ChatCompletions, `{"model":"gpt-4o","max_tokens":50,"n":3,"messages":[]}`,
			Request{Model: "gpt-4o", MaxOutput: 150, PromptTokens: 3, Choices: 3}},
		{"nulls are absent", ChatCompletions,
			`{"model":"gpt-4o","stream":null,"stream_options":null,"max_tokens":null,"messages":[{"role":"user","content":null}]}`,
			Request{Model: "gpt-4o", PromptTokens: 3 + 1 + 3, Choices: 1}},
		{"content parts", ChatCompletions,
			`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hello"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`,
			Request{Model: "gpt-4o", PromptTokens: 3 + 1 + hello + (85 + 8*170) + 3, Choices: 1}},
		{"tool calls and tools", ChatCompletions,
			`{"model":"gpt-4o","tools":[{"type":"function"}],"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"Hello","arguments":"Hello"}}]}]}`,
			Request{Model: "gpt-4o", PromptTokens: 3 + CountTokens("gpt-4o", "assistant") + 2*hello + CountTokens("gpt-4o", `[{"type":"function"}]`) + 3 +
				len64(`"id":"c1"`), Choices: 1}}, // an id is not read: its bytes
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
			Request{Model: "gpt-4.1", PromptTokens: 3 + 1 + hello + (85 + 8*170) + hello + 3 + len64(`"call_id":"c"`), Choices: 1}},
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
			Request{Model: "gpt-4o", MaxOutput: 4000, PromptTokens: 3 + len64(`"MAX_TOKENS":1`) + len64(`"Stream":true`), Choices: 1}},
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
			// The cap's field, the family and what is unsized have tests of
			// their own.
			got.CapField, got.HasCap, got.Family, got.Unsized = "", false, Family{}, nil
			if !reflect.DeepEqual(got, tt.want) {
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
		{"max_tokens negative", ChatCompletions, `{"max_tokens":-1}`, "max_tokens must be >= 1"},
		{"max_tokens zero", ChatCompletions, `{"max_tokens":0}`, "max_tokens must be >= 1, got 0"},
		{"max_completion_tokens zero", ChatCompletions, `{"max_completion_tokens":0,"max_tokens":10}`, "max_completion_tokens must be >= 1, got 0"},
		{"max_tokens zero beside a cap", ChatCompletions, `{"max_completion_tokens":10,"max_tokens":0}`, "max_tokens must be >= 1, got 0"},
		{"completions max_tokens zero", Completions, `{"max_tokens":0}`, "max_tokens must be >= 1"},
		{"anthropic max_tokens zero", AnthropicMessages, `{"max_tokens":0}`, "max_tokens must be >= 1"},
		{"max_output_tokens zero", Responses, `{"max_output_tokens":0}`, "max_output_tokens must be >= 1"},
		{"the larger of two caps past the model's", ChatCompletions, `{"model":"gpt-4o-mini","max_completion_tokens":10,"max_tokens":1000000000}`, "max_tokens is too large"},
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
		{"max_tokens past int64", ChatCompletions, `{"max_tokens":9223372036854775808}`, "max_tokens"},
		{"max_tokens at int64's max", ChatCompletions, `{"model":"gpt-4o-mini","max_tokens":9223372036854775807}`, "max_tokens is too large"},
		{"n times max_tokens would wrap", ChatCompletions, `{"model":"gpt-4o-mini","max_tokens":4611686018427387904,"n":2}`, "max_tokens is too large"},
		{"max_completion_tokens past the model's", ChatCompletions, `{"model":"o3","max_completion_tokens":100001}`, "at most 100000"},
		{"max_output_tokens past the model's", Responses, `{"model":"gpt-4o-mini","max_output_tokens":16385}`, "at most 16384"},
		{"unknown model past the default family's", Responses, `{"model":"llama","max_output_tokens":1e6}`, "max_output_tokens"},
		{"max_tokens exponent", ChatCompletions, `{"max_tokens":1e2}`, "max_tokens"},
		{"max_tool_calls negative", Responses, `{"max_tool_calls":-1}`, "max_tool_calls must be >= 0"},
		{"max_tool_calls huge", Responses, `{"max_tool_calls":1e30}`, "max_tool_calls"},
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

// A call's non-text parts are reserved by its model family's upper bound:
// an image by its detail, audio by its bytes, a file by the family's file
// bound; gpt-4o-mini's images are the scaled-up ones.
func TestParseRequestNonTextParts(t *testing.T) {
	text := func(model string) int64 { return 3 + CountTokens(model, "user") + 3 }
	chat := func(model, part string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":[` + part + `]}]}`
	}
	audio := strings.Repeat("A", 4000) // 3,000 bytes decoded
	tests := []struct {
		name string
		kind Kind
		body string
		want int64
	}{
		{"gpt-4o-mini image low", ChatCompletions, chat("gpt-4o-mini", `{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"low"}}`), text("gpt-4o-mini") + 2833},
		{"gpt-4o-mini image high", ChatCompletions, chat("gpt-4o-mini", `{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"high"}}`), text("gpt-4o-mini") + 2833 + 8*5667},
		{"gpt-4o-mini image auto", ChatCompletions, chat("gpt-4o-mini", `{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}`), text("gpt-4o-mini") + 2833 + 8*5667},
		{"gpt-4o image low", ChatCompletions, chat("gpt-4o", `{"type":"image_url","image_url":{"url":"https://x","detail":"low"}}`), text("gpt-4o") + 85},
		{"responses input_image low", Responses, `{"model":"gpt-4o-mini","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x","detail":"low"}]}]}`, text("gpt-4o-mini") + 2833},
		{"audio by its bytes", ChatCompletions, chat("gpt-4o-mini", `{"type":"input_audio","input_audio":{"data":"`+audio+`","format":"wav"}}`), text("gpt-4o-mini") + 30},
		{"file part", ChatCompletions, chat("gpt-4o-mini", `{"type":"file","file":{"file_id":"file-1"}}`), text("gpt-4o-mini") + 128_000},
		{"responses input_file", Responses, `{"model":"o3","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://x/a.pdf"}]}]}`, text("o3") + 128_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest(tt.kind, []byte(tt.body))
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if got.PromptTokens != tt.want {
				t.Errorf("got %d prompt tokens, want %d", got.PromptTokens, tt.want)
			}
		})
	}
}

// The cap goes in the field the endpoint and model take; a body without
// one says so.
func TestParseRequestCapField(t *testing.T) {
	tests := []struct {
		kind  Kind
		body  string
		field string
		has   bool
	}{
		{ChatCompletions, `{"model":"gpt-4o-mini"}`, "max_tokens", false},
		{ChatCompletions, `{"model":"o3-mini"}`, "max_completion_tokens", false},
		{ChatCompletions, `{"model":"gpt-5"}`, "max_completion_tokens", false},
		{ChatCompletions, `{"model":"openai/o4-mini","max_tokens":5}`, "max_completion_tokens", true},
		{Responses, `{"model":"o3"}`, "max_output_tokens", false},
		{Completions, `{"model":"gpt-3.5-turbo-instruct","max_tokens":1}`, "max_tokens", true},
		{Embeddings, `{"model":"text-embedding-3-small"}`, "", false},
	}
	for _, tt := range tests {
		got, err := ParseRequest(tt.kind, []byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if got.CapField != tt.field || got.HasCap != tt.has {
			t.Errorf("%s: got field %q has %v, want %q %v", tt.body, got.CapField, got.HasCap, tt.field, tt.has)
		}
	}
}

// What the provider bills beyond the body is listed, so that the gateway
// can refuse it or bound it.
func TestParseRequestUnsized(t *testing.T) {
	tests := []struct {
		kind Kind
		body string
		want string
	}{
		{Responses, `{"model":"o3","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id"},
		{Responses, `{"model":"o3","input":"hi","conversation":"conv_1"}`, "conversation"},
		{Responses, `{"model":"o3","prompt":{"id":"pmpt_1"}}`, "prompt"},
		{Responses, `{"model":"o3","input":[{"type":"item_reference","id":"msg_1"}]}`, "input item_reference"},
		{Responses, `{"model":"o3","input":"hi","tools":[{"type":"web_search"}]}`, "tools[0] (web_search)"},
		{ChatCompletions, `{"model":"gpt-4o-search-preview","messages":[],"web_search_options":{}}`, "web_search_options"},
		{Responses, `{"model":"o3","input":"hi","tools":[{"type":"function","name":"f"}]}`, ""},
		{Responses, `{"model":"o3","input":"hi","previous_response_id":null}`, ""},
		{Completions, `{"model":"x","prompt":"hi"}`, ""},
		{AnthropicMessages, `{"model":"claude-sonnet-4","max_tokens":9,"messages":[],"mcp_servers":[{"type":"url","url":"https://m"}]}`, "mcp_servers"},
		{AnthropicMessages, `{"model":"claude-sonnet-4","max_tokens":9,"messages":[],"mcp_servers":[]}`, ""},
	}
	for _, tt := range tests {
		got, err := ParseRequest(tt.kind, []byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if s := strings.Join(got.Unsized, ","); s != tt.want {
			t.Errorf("%s: got unsized %q, want %q", tt.body, s, tt.want)
		}
	}
}

// Both chat caps: the larger is the call's cap, and the field that holds
// the smaller is named, to be raised to it.
func TestParseRequestTwoCaps(t *testing.T) {
	tests := []struct {
		body  string
		max   int64
		other string
	}{
		{`{"model":"gpt-4o-mini","max_completion_tokens":10,"max_tokens":300}`, 300, "max_completion_tokens"},
		{`{"model":"gpt-4o-mini","max_completion_tokens":300,"max_tokens":10}`, 300, "max_tokens"},
		{`{"model":"gpt-4o-mini","max_completion_tokens":300,"max_tokens":300}`, 300, ""},
		{`{"model":"gpt-4o-mini","max_tokens":300,"n":2}`, 600, ""},
		{`{"model":"gpt-4o-mini","max_completion_tokens":10,"max_tokens":300,"n":2}`, 600, "max_completion_tokens"},
	}
	for _, tt := range tests {
		got, err := ParseRequest(ChatCompletions, []byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if got.MaxOutput != tt.max || got.OtherCap != tt.other || !got.HasCap {
			t.Errorf("%s: got max %d other %q, want %d %q", tt.body, got.MaxOutput, got.OtherCap, tt.max, tt.other)
		}
	}
	out, err := SetOutputCap([]byte(`{"max_completion_tokens":10,"max_tokens":300}`), "max_completion_tokens", 300)
	if err != nil || string(out) != `{"max_completion_tokens":300,"max_tokens":300}` {
		t.Fatalf("SetOutputCap: got %s (%v)", out, err)
	}
}

// ParseCall reads every kind as the model rename names: the count, the
// family and the price are those of the same call naming the renamed model
// itself, for JSON bodies and forms alike, and rename's error refuses the
// call.
func TestParseCallRename(t *testing.T) {
	part := func(name, v string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + v + "\r\n"
	}
	file := func(field string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"" + field + "\"; filename=\"a.bin\"\r\n\r\n" + strings.Repeat("x", 7500) + "\r\n"
	}
	const form = "multipart/form-data; boundary=B"
	deployments := map[string]string{"chat": "gpt-4o-mini", "voice": "tts-1", "ears": "whisper-1", "paint": "gpt-image-1", "old": "dall-e-2"}
	rename := func(d string) (string, error) {
		if m, ok := deployments[d]; ok {
			return m, nil
		}
		return "", errors.New("deployment " + strconv.Quote(d) + " unknown")
	}
	for _, tc := range []struct {
		name       string
		kind       Kind
		ct         string
		body       func(model string) string // the call naming model
		deployment string
	}{
		{"chat", ChatCompletions, "application/json", func(m string) string { return `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}]}` }, "chat"},
		{"responses", Responses, "application/json", func(m string) string { return `{"model":"` + m + `","input":"hi"}` }, "chat"},
		{"embeddings", Embeddings, "application/json", func(m string) string { return `{"model":"` + m + `","input":"hi"}` }, "chat"},
		{"speech", Speech, "application/json", func(m string) string { return `{"model":"` + m + `","input":"hello","voice":"alloy"}` }, "voice"},
		{"images", ImageGenerations, "application/json", func(m string) string { return `{"model":"` + m + `","prompt":"a cat"}` }, "paint"},
		{"transcription", Transcription, form, func(m string) string { return part("model", m) + file("file") + "--B--\r\n" }, "ears"},
		{"image edit", ImageEdits, form, func(m string) string { return part("model", m) + part("prompt", "a hat") + file("image") + "--B--\r\n" }, "paint"},
		{"variation", ImageVariations, form, func(m string) string { return part("model", m) + file("image") + "--B--\r\n" }, "old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := deployments[tc.deployment]
			r, err := ParseCall(tc.kind, tc.ct, []byte(tc.body(tc.deployment)), rename, DefaultModels(), Pace{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := ParseCall(tc.kind, tc.ct, []byte(tc.body(model)), nil, DefaultModels(), Pace{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, want) || r.Model != model {
				t.Errorf("deployment %s: got %+v; the call naming %s: %+v", tc.deployment, r, model, want)
			}
			if _, err := ParseCall(tc.kind, tc.ct, []byte(tc.body("nowhere")), rename, DefaultModels(), Pace{}); err == nil || !strings.Contains(err.Error(), `deployment "nowhere" unknown`) {
				t.Errorf("an unknown deployment: got %v, want rename's error", err)
			}
		})
	}
}
