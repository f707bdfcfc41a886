package builtin

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/imagetest"
)

func wavBase64(byteRate, dataBytes int) string {
	b := make([]byte, 44+dataBytes)
	copy(b, "RIFF")
	copy(b[8:], "WAVE")
	binary.LittleEndian.PutUint32(b[28:], uint32(byteRate))
	return base64.StdEncoding.EncodeToString(b)
}

// The mock bills non-text parts by the providers' published formulas, n
// choices, and keeps its own count of what it billed.
func TestOpenAIMockBillsLikeTheProviders(t *testing.T) {
	img := imagetest.PNGDataURL(t, 1024, 1024)
	pdf := "data:application/pdf;base64," + base64.StdEncoding.EncodeToString([]byte("%PDF-1.4 /Type /Pages /Type /Page /Type /Page"))
	chat := func(model, part string) string {
		return `{"model":"` + model + `","max_tokens":0,"messages":[{"role":"user","content":[` + part + `]}]}`
	}
	const overhead = 3 + 3 + 1 // reply priming, the message, its role "user"
	tests := []struct {
		name, body string
		want       int
	}{
		{"gpt-4o-mini inline low", chat("gpt-4o-mini", `{"type":"image_url","image_url":{"url":"`+img+`","detail":"low"}}`), overhead + 2833},
		{"gpt-4o-mini inline high: 768×768, 4 tiles", chat("gpt-4o-mini", `{"type":"image_url","image_url":{"url":"`+img+`","detail":"high"}}`), overhead + 2833 + 4*5667},
		{"gpt-4o-mini by URL: the worst size, 8 tiles", chat("gpt-4o-mini", `{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`), overhead + 2833 + 8*5667},
		{"gpt-4o inline auto", chat("gpt-4o", `{"type":"image_url","image_url":{"url":"`+img+`"}}`), overhead + 85 + 4*170},
		{"gpt-4.1-mini patches", chat("gpt-4.1-mini", `{"type":"image_url","image_url":{"url":"`+img+`","detail":"low"}}`), overhead + 1659},
		{"wav audio: 10 tokens a second", chat("gpt-4o-audio-preview", `{"type":"input_audio","input_audio":{"data":"`+wavBase64(16000, 16000)+`","format":"wav"}}`), overhead + 11},
		{"inline pdf: text and a page image each", chat("gpt-4o", `{"type":"file","file":{"file_data":"`+pdf+`"}}`), overhead + 12 + 2*(85+8*170)},
		{"file by id", chat("gpt-4o", `{"type":"file","file":{"file_id":"file-1"}}`), overhead + FileTokensByReference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newMock(t, OpenAIMockConfig{})
			resp, body := do(t, srv, "POST", "/v1/chat/completions", tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("got %d: %s", resp.StatusCode, body)
			}
			var got struct{ Usage chatUsage }
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Usage.PromptTokens != tt.want {
				t.Errorf("got %d prompt tokens, want %d", got.Usage.PromptTokens, tt.want)
			}
		})
	}

	mock := OpenAIMock(OpenAIMockConfig{CompletionTokens: 7, ReasoningTokens: 5, Sleep: noSleep})
	srv := newServer(t, mock)
	resp, body := do(t, srv, "POST", "/v1/chat/completions", `{"model":"o3","n":3,"messages":[{"role":"user","content":"hi"}]}`)
	var got struct {
		Choices []chatChoice
		Usage   chatUsage
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("got %d %s (%v)", resp.StatusCode, body, err)
	}
	// Each choice: 5 reasoning tokens and 7 visible ones.
	if len(got.Choices) != 3 || got.Usage.CompletionTokens != 3*12 || got.Usage.CompletionTokensDetails.ReasoningTokens != 3*5 {
		t.Errorf("n=3: got %d choices, usage %+v; want 3 choices, 36 completion tokens, 15 reasoning", len(got.Choices), got.Usage)
	}
	if b := mock.Billed(); b.Calls != 1 || b.Input != int64(got.Usage.PromptTokens) || b.Output != 36 || b.Reasoning != 15 {
		t.Errorf("billed %+v, want one call of %d input, 36 output, 15 reasoning", b, got.Usage.PromptTokens)
	}
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// A reasoning model streams nothing while it thinks: the pause before the
// first visible token is the reasoning's, and the whole completion is
// billed the moment the request is accepted.
func TestOpenAIMockStreamThinksBeforeItsFirstToken(t *testing.T) {
	// The mock writes its role chunk and then thinks: the first wait it
	// asks for reaches the test through slept, whenever the server gets there.
	slept := make(chan time.Duration, 16)
	mock := OpenAIMock(OpenAIMockConfig{CompletionTokens: 4, ReasoningTokens: 300, TokensPerSecond: 1000,
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case slept <- d:
			default:
			}
			return ctx.Err()
		}})
	srv := newServer(t, mock)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"o3","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Scan() // the role chunk
	if b := mock.Billed(); b.Output != 300+4 || b.Reasoning != 300 {
		t.Errorf("billed %+v on the first chunk, want the whole completion: 304 output, 300 reasoning", b)
	}
	select {
	case d := <-slept:
		if d != 300*time.Millisecond {
			t.Errorf("first wait %v, want 300 ms: 300 reasoning tokens at 1000/s", d)
		}
	case <-time.After(10 * time.Second):
		t.Error("the mock never paused to think after its role chunk")
	}
	resp.Body.Close()
}
