package llm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// decodeBodies are bodies where reading values in place could part from
// encoding/json: escapes, repeated and escaped keys, invalid UTF-8, nulls,
// numbers an int64 does not hold, wrong types, nested stream options.
var decodeBodies = []string{
	`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there, mock!"}],"max_tokens":16}`,
	`{"model":"gpt-\u0034o","stream":true,"stream_options":{"include_usage":false},"n":2}`,
	`{"model":"a","model":"b","max_tokens":1,"max_tokens":4000}`,
	`{"mod\u0065l":"x","MAX_TOKENS":3,"max_tokens":null}`,
	"{\"model\":\"bad \xff utf8\",\"max_tokens\":-0}",
	`{"max_tokens":1e3}`, `{"max_tokens":1.0}`, `{"max_tokens":9223372036854775808}`,
	`{"max_tokens":-9223372036854775808}`, `{"max_tokens":"16"}`, `{"stream":"yes"}`,
	`{"stream":null,"n":null,"model":null}`, `{"model":1}`, `{"model":"tab\tescaped\\n"}`,
	`{"stream_options":null}`, `{"stream_options":[]}`, `{"stream_options":{"include_usage":1}}`,
	`{"stream_options":{"include_usage":null,"include_usage":true}}`,
	`{"messages":{}}`, `{"messages":"x"}`, `{"messages":[1]}`, `{"messages":[null]}`,
	`{"messages":[{"role":"user","content":1e999}]}`, `{"messages":[{"role":1}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u","detail":"low"}}]},{"role":"assistant","name":"bot","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
	`{"input":"hi","instructions":"be brief","prompt":{"id":"p"},"previous_response_id":"r","max_output_tokens":5}`,
	`{"prompt":["a",[1,2]],"best_of":3}`, `{"system":[{"type":"text","text":"s"}],"messages":[]}`,
	` { "model" : "spaced" , "max_tokens" : 7 } `, `{}`, `{"x":{"model":"nested"}}`,
	`{"model":"x"} trailing`, `{"model":"x"`, `{"model":"x",}`,
}

// The in-place read of a request gives what encoding/json's gives: the
// same fields, or the same error.
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, body := range decodeBodies {
		for kind := ChatCompletions; kind <= AnthropicMessages; kind++ {
			t.Run(fmt.Sprintf("%s/%s", kind, body), func(t *testing.T) {
				var fast, slow wireRequest
				errFast, errSlow := fast.decode(kind, []byte(body)), slow.decodeMap(kind, []byte(body))
				if fmt.Sprint(errFast) != fmt.Sprint(errSlow) {
					t.Fatalf("error: got %v, want %v", errFast, errSlow)
				}
				fast.unread = 0 // what the count does not read: only decode knows
				if errSlow == nil && !reflect.DeepEqual(fast, slow) {
					t.Fatalf("got %+v, want %+v", fast, slow)
				}
				if len(slow.Messages) == 0 || string(slow.Messages) == "null" {
					return
				}
				var c1, c2 counter
				e1, e2 := c1.messages("messages", fast.Messages), c2.messagesOneByOne("messages", slow.Messages)
				if fmt.Sprint(e1) != fmt.Sprint(e2) || c1.n != c2.n {
					t.Fatalf("messages: got %d, %v; want %d, %v", c1.n, e1, c2.n, e2)
				}
			})
		}
	}
}

// usageBodies are responses where reading the usage in place could part
// from encoding/json: case-folded and escaped names, repeated usages,
// nulls, details objects, numbers an int64 does not hold, wrong types.
var usageBodies = []string{
	`{"id":"c","choices":[{"message":{"content":"x \" } usage"}}],"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`,
	`{"USAGE":{"prompt_tokens":2},"Usage":{"completion_tokens":3}}`,
	`{"usage":{"prompt_tokens":2},"usage":null}`, `{"usage":null,"usage":{"prompt_tokens":4}}`,
	`{"us\u0061ge":{"prompt_tokens":5}}`, "{\"u\u017fage\":{\"prompt_tokens\":6}}",
	`{"usage":[]}`, `{"usage":"x"}`, `{"usage":{"prompt_tokens":1.5}}`, `{"usage":{"prompt_tokens":1},"x":}`,
	`[]`, `null`, `"usage"`, ` {"usage" : {"input_tokens":1,"output_tokens":2}} `, `{"usage":{}}`,
	`{"usage":{"PROMPT_TOKENS":3,"Completion_Tokens":4,"prompt_tokens":5}}`,
	`{"usage":{"prompt_tokens":null,"completion_tokens":-7,"total_tokens":9223372036854775807}}`,
	`{"usage":{"prompt_tokens":9223372036854775808}}`, `{"usage":{"prompt_tokens":1e2}}`, `{"usage":{"prompt_tokens":"1"}}`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":1,"audio_tokens":0}}}`,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":2}},"usage":{"prompt_tokens_details":{"audio_tokens":1}}}`,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":2}},"usage":{"prompt_tokens_details":null}}`,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":2}},"usage":{"prompt_tokens_details":{"cached_tokens":"x"}}}`,
	`{"usage":{"prompt_tokens_details":{"reasoning_tokens":"ignored"},"completion_tokens_details":{"cached_tokens":"ignored"}}}`,
	`{"usage":{"prompt_tokens_details":[],"completion_tokens":1}}`, `{"usage":{"completion_tokens_details":3}}`,
	`{"usage":{"completion_tokens_details":{"reasoning_tokens":12,"Reasoning_Tokens":13}}}`,
	`{"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":8},"total_tokens":30}}`,
	`{"usage":{"input_tokens":3,"cache_read_input_tokens":100,"cache_creation_input_tokens":50,"output_tokens":9}}`,
	"{\"usage\":{\"prompt_tok\u0065ns\":8,\"\xff\":1}}", "{\"usage\":{\"\u212aey\":1,\"prompt_tokens\":2}}",
	`{"usage":{"prompt_tokens":2,"extra":{"nested":[1,{"prompt_tokens":99}]}}}`,
	`{"usage":{"prompt_tokens":2},"usage":{"completion_tokens":3}}`,
}

// ParseUsage reads only the usage members, and gets what decoding the
// whole body gets, for every kind.
func TestParseUsageMatchesEncodingJSON(t *testing.T) {
	for _, body := range usageBodies {
		t.Run(body, func(t *testing.T) { checkParseUsage(t, []byte(body)) })
	}
}

func FuzzParseUsage(f *testing.F) {
	for _, body := range usageBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkParseUsage(t, body) })
}

func checkParseUsage(t *testing.T, body []byte) {
	t.Helper()
	var resp struct {
		Usage       *wireUsage `json:"usage"`
		ServiceTier *string    `json:"service_tier"`
	}
	err := json.Unmarshal(body, &resp)
	wantOK := err == nil && resp.Usage != nil
	for kind := ChatCompletions; kind <= AnthropicMessages; kind++ {
		var want Usage
		if wantOK {
			want = resp.Usage.usage(kind)
			if want.ServiceTier == "" && resp.ServiceTier != nil {
				want.ServiceTier = *resp.ServiceTier
			}
		}
		got, ok := ParseUsage(kind, body)
		if got != want || ok != wantOK {
			t.Fatalf("%s %q: got %+v, %v; want %+v, %v", kind, body, got, ok, want, wantOK)
		}
	}
	if w, _, present, ok := usageMember(body); ok && wantOK && (!present || !reflect.DeepEqual(&w, resp.Usage)) {
		t.Fatalf("%q: got %+v (present %v), want %+v", body, w, present, resp.Usage)
	}
}
