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

// ParseUsage reads only the usage members, and gets what decoding the
// whole body gets.
func TestParseUsageMatchesEncodingJSON(t *testing.T) {
	for _, body := range []string{
		`{"id":"c","choices":[{"message":{"content":"x \" } usage"}}],"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`,
		`{"USAGE":{"prompt_tokens":2},"Usage":{"completion_tokens":3}}`,
		`{"usage":{"prompt_tokens":2},"usage":null}`, `{"usage":null,"usage":{"prompt_tokens":4}}`,
		`{"us\u0061ge":{"prompt_tokens":5}}`, "{\"u\u017fage\":{\"prompt_tokens\":6}}",
		`{"usage":[]}`, `{"usage":"x"}`, `{"usage":{"prompt_tokens":1.5}}`, `{"usage":{"prompt_tokens":1},"x":}`,
		`[]`, `null`, `"usage"`, ` {"usage" : {"input_tokens":1,"output_tokens":2}} `, `{"usage":{}}`,
	} {
		t.Run(body, func(t *testing.T) {
			var resp struct {
				Usage *wireUsage `json:"usage"`
			}
			err := json.Unmarshal([]byte(body), &resp)
			wantOK := err == nil && resp.Usage != nil
			var want Usage
			if wantOK {
				want = resp.Usage.usage(ChatCompletions)
			}
			got, ok := ParseUsage(ChatCompletions, []byte(body))
			if got != want || ok != wantOK {
				t.Fatalf("got %+v, %v; want %+v, %v", got, ok, want, wantOK)
			}
		})
	}
}
