package llm

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
)

var settingsRE = regexp.MustCompile(`"model":"c","max_tokens":\d+`)

// claude is the built-in family of Claude models.
var claude = DefaultModels().For("claude-sonnet-4-5")

func TestParseAnthropicPrompt(t *testing.T) {
	img := strings.Repeat("A", 40_000) // a 30 KB image, base64
	for _, tc := range []struct {
		name     string
		body     string
		bound    int64 // beyond len(body) + anthropicFraming, less the settings
		thinking bool
	}{
		{"text", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"héllo ✓ world"}]}`, 0, false},
		{"image", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}},{"type":"text","text":"what is it"}]}]}`,
			claude.ImageHigh - int64(len(img)), false},
		{"image by url", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}`,
			claude.ImageHigh, false},
		{"tools", `{"model":"c","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]}`,
			anthropicToolPrompt, false},
		{"thinking", `{"model":"c","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"x"}]}`, 0, true},
		{"text document", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"plain words"}}]}]}`, 0, false},
		{"pdf", `{"model":"c","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0x"}}]}]}`,
			claude.FileTokens - int64(len("JVBERi0x")), false},
		{"image in a tool result", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}}]}]}]}`,
			claude.ImageHigh - int64(len(img)), false},
		// A tool's input holding an object typed image is text: its bytes
		// stay in the bound.
		{"image in a tool's input", `{"model":"c","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"type":"image","source":{"type":"base64","data":"` + img + `"}}}]}]}`,
			0, false},
		{"pdf by file", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"f1"}}]}]}`,
			claude.FileTokens, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseAnthropicPrompt([]byte(tc.body), claude)
			if err != nil {
				t.Fatal(err)
			}
			// The settings, "model":"c" and "max_tokens":N, are billed as
			// nothing; the comma between them stays.
			settings := int64(len(settingsRE.FindString(tc.body)) - 1)
			if want := int64(len(tc.body)) - settings + anthropicFraming + tc.bound; p.Bound != want || p.Thinking != tc.thinking {
				t.Fatalf("got %+v, want bound %d, thinking %v", p, want, tc.thinking)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `{"messages":"x"}`, `{"messages":[{"role":"user"}],"system":{`} {
		if _, err := ParseAnthropicPrompt([]byte(bad), claude); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%q: got %v, want ErrInvalidRequest", bad, err)
		}
	}
}

// The byte bound is never below what a byte-level BPE vocabulary counts
// for the same text, whatever the script.
func TestAnthropicBoundCoversATokenizer(t *testing.T) {
	for _, text := range []string{
		strings.Repeat("rate limits ", 500),
		strings.Repeat("速率限制 ", 300),
		strings.Repeat("🙂🚦", 200),
		strings.Repeat(`{"a":[1,2,3]} `, 200),
	} {
		quoted, _ := json.Marshal(text)
		body := `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":` + string(quoted) + `}]}`
		p, err := ParseAnthropicPrompt([]byte(body), claude)
		if err != nil {
			t.Fatal(err)
		}
		if n := CountTokens("gpt-4o", text) + tokensPerMessage + tokensReplyPrime; n > p.Bound {
			t.Fatalf("%.20q…: o200k counts %d, bound %d", text, n, p.Bound)
		}
	}
}

// On Anthropic too every value counts: the settings are billed as
// nothing, and any other value, its key included, keeps its bytes in the
// bound, wherever it is.
func TestAnthropicEveryValueCounts(t *testing.T) {
	hidden := strings.Repeat("quota bypass ", 300) // 3,900 bytes of text
	img := strings.Repeat("A", 40_000)
	msg := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name string
		body string
		// free is the bytes of the body billed as nothing: the settings'
		// members (key, quotes, colon and value), or the payload an
		// image's bound replaces.
		free int64
		// extra is what the bound adds to the body's bytes.
		extra int64
	}{
		{"every setting", `{"model":"claude-sonnet-4-5","max_tokens":50,"stream":true,"temperature":0.5,"top_p":0.9,"top_k":40,"service_tier":"auto",` + msg + `}`,
			int64(len(`"model":"claude-sonnet-4-5""max_tokens":50"stream":true"temperature":0.5"top_p":0.9"top_k":40"service_tier":"auto"`)), 0},
		{"a repeated setting", `{"model":"x","model":"claude-sonnet-4-5","max_tokens":50,` + msg + `}`,
			int64(len(`"model":"x""model":"claude-sonnet-4-5""max_tokens":50`)), 0},
		{"a setting's key escaped", `{"mod\u0065l":"claude-sonnet-4-5","max_tokens":50,` + msg + `}`,
			int64(len(`"model":"claude-sonnet-4-5""max_tokens":50`)), 0},
		{"a field of tomorrow", `{"model":"c","max_tokens":50,"tomorrow":{"notes":["` + hidden + `"]},` + msg + `}`,
			int64(len(`"model":"c""max_tokens":50`)), 0},
		{"a setting's name in another case", `{"MODEL":"` + hidden + `","model":"c","max_tokens":50,` + msg + `}`,
			int64(len(`"model":"c""max_tokens":50`)), 0},
		{"metadata, stop_sequences, tool_choice, thinking", `{"model":"c","max_tokens":5000,"metadata":{"user_id":"` + hidden + `"},"stop_sequences":["` + hidden + `"],` +
			`"tool_choice":{"type":"auto"},"thinking":{"type":"enabled","budget_tokens":2000},` + msg + `}`,
			int64(len(`"model":"c""max_tokens":5000`)), 0},
		{"a member of a message no one reads", `{"model":"c","max_tokens":50,"messages":[{"role":"user","content":"hi","notes":"` + hidden + `"}]}`,
			int64(len(`"model":"c""max_tokens":50`)), 0},
		{"a member of a content block", `{"model":"c","max_tokens":50,"messages":[{"role":"user","content":[{"type":"text","text":"hi","citations":[{"cited_text":"` + hidden + `"}]}]}]}`,
			int64(len(`"model":"c""max_tokens":50`)), 0},
		{"a tool's schema", `{"model":"c","max_tokens":50,"tools":[{"name":"f","description":"` + hidden + `","input_schema":{"type":"object"}}],` + msg + `}`,
			int64(len(`"model":"c""max_tokens":50`)), anthropicToolPrompt},
		{"an image typed object in a tool's input", `{"model":"c","max_tokens":50,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f",` +
			`"input":{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + hidden + `"}}}]}]}`,
			int64(len(`"model":"c""max_tokens":50`)), 0},
		{"an earlier messages with an image", `{"model":"c","max_tokens":50,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + hidden + `"}}]}],` + msg + `}`,
			int64(len(`"model":"c""max_tokens":50`)), 0},
		{"an image in the messages read", `{"model":"c","max_tokens":50,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}}]}]}`,
			int64(len(`"model":"c""max_tokens":50`)) + int64(len(img)), claude.ImageHigh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseAnthropicPrompt([]byte(tc.body), claude)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(len(tc.body)) - tc.free + anthropicFraming + tc.extra; p.Bound != want {
				t.Fatalf("got bound %d, want %d", p.Bound, want)
			}
			// A hidden text a provider reads is never free: a token is at
			// least a byte.
			if strings.Contains(tc.body, hidden) && p.Bound < int64(len(hidden)) {
				t.Fatalf("got bound %d, below the %d bytes of the hidden text", p.Bound, len(hidden))
			}
		})
	}
}
