package llm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// messageArrays are arrays where counting in place could part from the
// generic values: every text key, nesting, escapes, invalid UTF-8, repeated
// keys, wrong types, non-text parts, numbers, non-objects.
var messageArrays = []string{
	`[{"role":"user","content":"Hello there, mock!"}]`,
	`[{"role":"system","content":"be brief"},{"role":"user","name":"ann","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}]`,
	`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b \u00e9 \n"}]}]`,
	`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","detail":"low"}}]}]`,
	`[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA"}}]}]`,
	`[{"type":"item_reference","id":"x"}]`, `[{"type":"function_call","name":"f","arguments":"{}"},{"type":"function_call_output","output":"ok"}]`,
	`[{"type":"reasoning","summary":[{"type":"summary_text","text":"thought"}]}]`,
	`[{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"tool_use","name":"t","input":{"q":"x","n":3}}]}]`,
	`[{"role":"user","content":"a","content":"bb bb"}]`, `[{"r\u006fle":"user","content":"esc key"}]`,
	"[{\"role\":\"user\",\"content\":\"bad \xff utf8\"}]", "[{\"role\":\"us\xffer\",\"content\":\"x\"}]",
	`[{"role":1}]`, `[{"role":null}]`, `[{"role":"user","content":1}]`, `[{"role":"user","content":{}}]`,
	`[{"role":"user","content":true}]`, `[{"role":"user","name":7,"content":"x"}]`, `[{"name":"n"}]`, `[{"type":7,"text":"t"}]`,
	`[{"role":"user","content":"x","n":1e999}]`, `[{"role":"user","content":"x","n":1e2}]`, `[{"role":"user","content":"x","n":-12.5}]`,
	`[1]`, `[null]`, `["x"]`, `[[]]`, `[]`, `{}`, `"x"`, `3`, `[{}]`, ` [ { "role" : "user" , "content" : "spaced" } ] `,
	`[{"role":"user","content":[null,1,true,"s",["t"],{"text":"u"}]}]`,
	`[{"role":"developer","content":"d","refusal":"r","output":["o",{"text":"p"}],"summary":"s","input":"i","arguments":"a","function":{"name":"fn"}}]`,
}

// messagesPlain counts what the generic values count, and leaves to them
// what it does not read, so messages gives the same count and error.
func TestMessagesPlainMatchesDecoded(t *testing.T) {
	for _, a := range messageArrays {
		t.Run(a, func(t *testing.T) { checkMessagesPlain(t, []byte(a)) })
	}
}

// The common messages are counted in place: the comparison above is not
// of the generic values with themselves.
func TestMessagesPlainReadsCommonMessages(t *testing.T) {
	for _, a := range messageArrays[:3] {
		c := counter{model: "gpt-4o", family: Models(nil).For("gpt-4o")}
		if !c.messagesPlain([]byte(a)) || c.n == 0 {
			t.Errorf("%s: not counted in place", a)
		}
	}
}

func FuzzMessagesPlain(f *testing.F) {
	for _, a := range messageArrays {
		f.Add([]byte(a))
	}
	f.Fuzz(func(t *testing.T, a []byte) { checkMessagesPlain(t, a) })
}

func checkMessagesPlain(t *testing.T, a []byte) {
	t.Helper()
	if !json.Valid(a) {
		return // messages reads a member of a valid body
	}
	raw := json.RawMessage(a[skipSpace(a, 0):]) // a member's value starts at its first byte
	for _, model := range []string{"gpt-4o", "gpt-4"} {
		fast := counter{model: model, family: Models(nil).For(model)}
		slow := fast
		errFast, errSlow := fast.messages("messages", raw), slow.messagesDecoded("messages", raw)
		if fmt.Sprint(errFast) != fmt.Sprint(errSlow) || fast.n != slow.n || !reflect.DeepEqual(fast.unsized, slow.unsized) {
			t.Fatalf("%s %q: got %d, %v, %q; want %d, %v, %q", model, a, fast.n, errFast, fast.unsized, slow.n, errSlow, slow.unsized)
		}
	}
}
