package llm

import (
	"strings"
	"testing"
)

func len64(s string) int64 { return int64(len(s)) }

// hidden is text a provider bills that hides in one field: far more
// tokens than any structure around it.
var hidden = strings.Repeat("zq7 ", 20000)

// Every value a body carries counts: a field the count reads is counted,
// and any other, wherever it hides, is bounded by its bytes, so the
// reservation is never below what the provider can bill for it.
func TestEveryValueCounts(t *testing.T) {
	h := `"` + hidden + `"`
	tests := []struct {
		name string
		kind Kind
		body string
	}{
		{"legacy function_call", ChatCompletions,
			`{"model":"gpt-4o","messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":` + h + `}}]}`},
		{"custom tool input", ChatCompletions,
			`{"model":"gpt-4o","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"f","input":` + h + `}}]}]}`},
		{"response_format schema", ChatCompletions,
			`{"model":"gpt-4o","messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"description":` + h + `}}}}`},
		{"text.format schema", Responses,
			`{"model":"gpt-4o","input":"hi","text":{"format":{"type":"json_schema","schema":{"description":` + h + `}}}}`},
		{"file_search_call results", Responses,
			`{"model":"gpt-4o","input":[{"type":"file_search_call","id":"fs","queries":["q"],"results":[{"text":` + h + `}]}]}`},
		{"unknown member of a message", ChatCompletions,
			`{"model":"gpt-4o","messages":[{"role":"user","content":"hi","tomorrow":` + h + `}]}`},
		{"a key", ChatCompletions, `{"model":"gpt-4o","messages":[],` + h + `:1}`},
		{"a field another kind reads", Responses, `{"model":"gpt-4o","input":"hi","messages":[{"role":"user","content":` + h + `}]}`},
		{"an earlier duplicate", ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":` + h + `}],"messages":[]}`},
		{"an image in a tool's arguments", Responses,
			`{"model":"gpt-4o","input":[{"type":"custom_tool_call","call_id":"c","name":"f","input":{"type":"input_image","image_url":` + h + `}}]}`},
		{"a name that is not a string", ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"x","name":{"n":` + h + `}}]}`},
	}
	floor := CountTokens("gpt-4o", hidden)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest(tt.kind, []byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if r.PromptTokens < floor {
				t.Errorf("got %d prompt tokens, want at least %d (the hidden text's)", r.PromptTokens, floor)
			}
			if r.PromptTokens > int64(len(tt.body))+16 {
				t.Errorf("got %d prompt tokens, want at most the body's %d bytes and the framing", r.PromptTokens, len(tt.body))
			}
		})
	}
}

// A field the count reads is counted as tokens, not as bytes: the hidden
// fields of the legacy function call and of a custom tool are read.
func TestHiddenFieldsAreCountedPrecisely(t *testing.T) {
	floor := CountTokens("gpt-4o", hidden)
	for _, body := range []string{
		`{"model":"gpt-4o","messages":[{"role":"assistant","function_call":{"name":"f","arguments":"` + hidden + `"}}]}`,
		`{"model":"gpt-4o","messages":[{"role":"assistant","tool_calls":[{"type":"custom","custom":{"name":"f","input":"` + hidden + `"}}]}]}`,
	} {
		r, err := ParseRequest(ChatCompletions, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if r.PromptTokens < floor || r.PromptTokens > floor+40 {
			t.Errorf("got %d prompt tokens, want %d and the framing", r.PromptTokens, floor)
		}
	}
}

// A prediction's tokens are reserved as output, on top of the cap: what
// of it the answer does not use is billed as output.
func TestPredictionIsOutput(t *testing.T) {
	for _, pred := range []string{`"` + hidden + `"`, `[{"type":"text","text":"` + hidden + `"}]`} {
		body := `{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":` + pred + `}}`
		r, err := ParseRequest(ChatCompletions, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		want := CountTokens("gpt-4o", hidden)
		if r.PredictionTokens < want || r.PredictionTokens > want+20 {
			t.Errorf("got %d prediction tokens, want %d", r.PredictionTokens, want)
		}
		if r.PromptTokens > 30 {
			t.Errorf("got %d prompt tokens, want the messages' alone", r.PromptTokens)
		}
	}
	if _, err := ParseRequest(ChatCompletions, []byte(`{"model":"gpt-4o","messages":[],"prediction":"x"}`)); err == nil {
		t.Error("a prediction that is not an object: got no error")
	}
}

// A body with nothing unread adds nothing to its count: the bound costs a
// common call nothing.
func TestCommonBodyAddsNoBytes(t *testing.T) {
	body := `{"model":"gpt-4o","temperature":0.2,"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,` +
		`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`
	r, err := ParseRequest(ChatCompletions, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := 3 + 2*tokensPerMessage + CountTokens("gpt-4o", "system") + CountTokens("gpt-4o", "be brief") +
		CountTokens("gpt-4o", "user") + CountTokens("gpt-4o", "hi")
	if r.PromptTokens != want {
		t.Errorf("got %d prompt tokens, want %d", r.PromptTokens, want)
	}
}
