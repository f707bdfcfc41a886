package llm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestWithIncludeUsage(t *testing.T) {
	tests := []struct {
		name, body, want string
		added            bool
	}{
		{"adds the object after the last member",
			`{"model":"gpt-4o","stream":true}`,
			`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true}}`, true},
		{"keeps spacing and the closing line",
			"{\n  \"stream\" : true ,\n  \"temperature\": 1e0\n}\n",
			"{\n  \"stream\" : true ,\n  \"temperature\": 1e0,\"stream_options\":{\"include_usage\":true}\n}\n", true},
		{"last member is an object with braces in strings",
			`{"stream":true,"metadata":{"a":"}{\"}"}}`,
			`{"stream":true,"metadata":{"a":"}{\"}"},"stream_options":{"include_usage":true}}`, true},
		{"fills an empty stream_options",
			`{"stream":true,"stream_options":{ }}`,
			`{"stream":true,"stream_options":{"include_usage":true }}`, true},
		{"adds to stream_options",
			`{"stream_options": {"continuous_usage_stats": false} ,"stream":true}`,
			`{"stream_options": {"continuous_usage_stats": false,"include_usage":true} ,"stream":true}`, true},
		{"replaces null stream_options",
			`{"stream":true,"stream_options":null,"x":[1]}`,
			`{"stream":true,"stream_options":{"include_usage":true},"x":[1]}`, true},
		{"turns false on",
			`{"stream":true,"stream_options":{"include_usage":false}}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"turns null on",
			`{"stream":true,"stream_options":{"include_usage" : null, "x":1}}`,
			`{"stream":true,"stream_options":{"include_usage" : true, "x":1}}`, true},
		{"escaped key names are the same key",
			`{"str\u0065am":true,"stream_options":{"include_\u0075sage":true}}`,
			`{"str\u0065am":true,"stream_options":{"include_\u0075sage":true}}`, false},
		{"already asked", `{"stream":true,"stream_options":{"include_usage":true}}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`, false},
		{"not streaming", `{"stream":false}`, `{"stream":false}`, false},
		{"stream null", `{"stream":null}`, `{"stream":null}`, false},
		{"no stream", `{"model":"gpt-4o"}`, `{"model":"gpt-4o"}`, false},
		{"empty object", `{}`, `{}`, false},
		{"last duplicate wins: streaming", `{"stream":false,"stream":true}`,
			`{"stream":false,"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"last duplicate wins: not streaming", `{"stream":true,"stream":false}`,
			`{"stream":true,"stream":false}`, false},
		{"unicode and leading space kept", " \t{\"messages\":[{\"content\":\"héllo ✓\"}],\"stream\":true}",
			" \t{\"messages\":[{\"content\":\"héllo ✓\"}],\"stream\":true,\"stream_options\":{\"include_usage\":true}}", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, added, err := WithIncludeUsage([]byte(tt.body))
			if err != nil {
				t.Fatalf("WithIncludeUsage: %v", err)
			}
			if string(out) != tt.want || added != tt.added {
				t.Errorf("got %s (added %v), want %s (added %v)", out, added, tt.want, tt.added)
			}
			// What was added must be what ParseRequest then reads.
			r, err := ParseRequest(ChatCompletions, out)
			if err != nil {
				t.Fatalf("ParseRequest(out): %v", err)
			}
			if r.Stream && !r.IncludeUsage {
				t.Errorf("ParseRequest(out).IncludeUsage = false on a streaming request, want true")
			}
		})
	}
}

func TestWithIncludeUsageKeepsInput(t *testing.T) {
	body := []byte(`{"stream":true}`)
	out, _, err := WithIncludeUsage(body)
	if err != nil {
		t.Fatal(err)
	}
	out[1] = 'X'
	if string(body) != `{"stream":true}` {
		t.Errorf("input changed to %s, want it untouched", body)
	}
}

func TestWithIncludeUsageErrors(t *testing.T) {
	for _, body := range []string{
		``, `null`, `[]`, `{"stream":true`, `{"stream":true} {}`,
		`{"stream":"yes"}`, `{"stream":1}`,
		`{"stream":true,"stream_options":[]}`, `{"stream":true,"stream_options":"x"}`,
		`{"stream":true,"stream_options":{"include_usage":1}}`,
	} {
		t.Run(body, func(t *testing.T) {
			out, added, err := WithIncludeUsage([]byte(body))
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("got (%s, %v, %v), want an error wrapping ErrInvalidRequest", out, added, err)
			}
		})
	}
}

func FuzzWithIncludeUsage(f *testing.F) {
	for _, s := range []string{`{"stream":true}`, `{"stream":true,"stream_options":{}}`, `{"a":[{"b":"}"}],"stream":true}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, added, err := WithIncludeUsage(body)
		if err != nil {
			return
		}
		if !added {
			if string(out) != string(body) {
				t.Fatalf("not added, but %q became %q", body, out)
			}
			return
		}
		var doc struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatalf("output %q of input %q does not decode: %v", out, body, err)
		}
		if !doc.StreamOptions.IncludeUsage {
			t.Fatalf("added to %q gives %q without include_usage", body, out)
		}
	})
}

// The cap is added as one member, or replaces a null; nothing else moves.
func TestWithOutputCap(t *testing.T) {
	tests := []struct{ name, body, field, want string }{
		{"added last", `{"model":"o3","messages":[]}`, "max_completion_tokens", `{"model":"o3","messages":[],"max_completion_tokens":700}`},
		{"spacing kept", "{ \"model\" : \"x\" ,\n \"input\":\"hi\"\n}", "max_output_tokens", "{ \"model\" : \"x\" ,\n \"input\":\"hi\",\"max_output_tokens\":700\n}"},
		{"empty object", `{}`, "max_tokens", `{"max_tokens":700}`},
		{"null replaced", `{"max_tokens":null,"n":2}`, "max_tokens", `{"max_tokens":700,"n":2}`},
		{"last duplicate null", `{"max_tokens":5,"max_tokens":null}`, "max_tokens", `{"max_tokens":5,"max_tokens":700}`},
		{"present kept", `{"max_tokens":5}`, "max_tokens", `{"max_tokens":5}`},
		{"nested is not top", `{"a":{"max_tokens":1}}`, "max_tokens", `{"a":{"max_tokens":1},"max_tokens":700}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithOutputCap([]byte(tt.body), tt.field, 700)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if _, err := ParseRequest(ChatCompletions, got); err != nil {
				t.Fatalf("the result does not parse: %v", err)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `{"a":`, `null`} {
		if _, err := WithOutputCap([]byte(bad), "max_tokens", 1); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%q: got %v, want ErrInvalidRequest", bad, err)
		}
	}
}

// skipStringByByte is skipString as a plain byte loop: what the search
// with bytes.IndexByte must agree with.
func skipStringByByte(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

func TestSkipStringIsTheByteLoop(t *testing.T) {
	long := strings.Repeat("word ", 20000)
	escapes := strings.Repeat(`\n\"\\`, 5000)
	for _, s := range []string{
		`""`, `"a"`, `"\""`, `"\\"`, `"\\\""`, `"a\"b"x`, `"\\\\"`, `"\u0041"`,
		`"`, `"\`, `"a\`, `"\"`, `"a\\`, `"abc`, // unterminated: only invalid JSON
		`"` + long + `"`, `"` + escapes + `"`, `"` + escapes + long + `\"` + `"`,
		`"` + long + `\` + `"` + long, `"` + long + `\\` + `"` + long,
	} {
		for _, tail := range []string{"", `,"b":"c"}`, `\"`} {
			b := []byte(s + tail)
			if got, want := skipString(b, 0), skipStringByByte(b, 0); got != want {
				t.Errorf("skipString(%.40q…, len %d) = %d, the byte loop %d", b, len(b), got, want)
			}
		}
	}
}

func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"a\"b"c`, `"\\\\"`, `"x`, `"\`, `"a\\"b\"c"`} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, b []byte, i int) {
		if i < 0 || i >= len(b) {
			return
		}
		if got, want := skipString(b, i), skipStringByByte(b, i); got != want {
			t.Fatalf("skipString(%q, %d) = %d, the byte loop %d", b, i, got, want)
		}
	})
}
