package builtin

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func anthropicPost(t *testing.T, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

var anthropicHeaders = map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01"}

// The mock answers a message as JSON, and as Anthropic's event sequence
// when streamed, with output_tokens cut at max_tokens and the cache counts
// it is told to report.
func TestAnthropicMockMessages(t *testing.T) {
	m := NewAnthropicMock(AnthropicMockConfig{CompletionTokens: 12, CacheReadTokens: 4})
	srv := httptest.NewServer(m)
	defer srv.Close()
	body := `{"model":"claude","max_tokens":%s,"messages":[{"role":"user","content":"hello there, mock"}]%s}`
	fill := func(max, extra string) string {
		return strings.Replace(strings.Replace(body, "%s", max, 1), "%s", extra, 1)
	}

	resp := anthropicPost(t, srv.URL, fill("5", ""), anthropicHeaders)
	var msg struct {
		Type       string
		StopReason string `json:"stop_reason"`
		Usage      map[string]int
	}
	json.NewDecoder(resp.Body).Decode(&msg)
	resp.Body.Close()
	if resp.StatusCode != 200 || msg.Type != "message" || msg.StopReason != "max_tokens" || msg.Usage["output_tokens"] != 5 || msg.Usage["cache_read_input_tokens"] != 4 {
		t.Fatalf("got %d %+v, want a message of 5 tokens cut at max_tokens with 4 cached", resp.StatusCode, msg)
	}

	resp = anthropicPost(t, srv.URL, fill("100", `,"stream":true`), anthropicHeaders)
	var events []string
	var output int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
		var d struct {
			Usage map[string]int
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, "message_delta") {
			json.Unmarshal([]byte(data), &d)
			output = d.Usage["output_tokens"]
		}
	}
	resp.Body.Close()
	want := "message_start,content_block_start,ping," + strings.Repeat("content_block_delta,", 12) + "content_block_stop,message_delta,message_stop"
	if got := strings.Join(events, ","); got != want || output != 12 {
		t.Fatalf("events %s (output %d), want %s and 12", got, output, want)
	}
	if m.Billed() != 5+12 {
		t.Fatalf("billed %d, want 17", m.Billed())
	}
}

// Errors come in Anthropic's shape: no key, no version, no max_tokens.
func TestAnthropicMockErrors(t *testing.T) {
	srv := httptest.NewServer(NewAnthropicMock(AnthropicMockConfig{}))
	defer srv.Close()
	ok := `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name   string
		body   string
		header map[string]string
		status int
		typ    string
	}{
		{"no key", ok, map[string]string{"anthropic-version": "2023-06-01"}, 401, "authentication_error"},
		{"no version", ok, map[string]string{"x-api-key": "k"}, 400, "invalid_request_error"},
		{"no max_tokens", `{"model":"claude","messages":[{"role":"user","content":"hi"}]}`, anthropicHeaders, 400, "invalid_request_error"},
		{"bearer key", ok, map[string]string{"authorization": "Bearer k", "anthropic-version": "2023-06-01"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := anthropicPost(t, srv.URL, tc.body, tc.header)
			defer resp.Body.Close()
			var e struct {
				Type  string
				Error struct{ Type string }
			}
			json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tc.status || (tc.typ != "" && (e.Type != "error" || e.Error.Type != tc.typ)) {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, e, tc.status, tc.typ)
			}
		})
	}
}

// A stream whose client leaves stops generating: what it billed is what it
// wrote before the cut, not its whole length.
func TestAnthropicMockStreamCut(t *testing.T) {
	gate := make(chan struct{})
	m := NewAnthropicMock(AnthropicMockConfig{CompletionTokens: 1000, TokensPerSecond: 1000,
		Sleep: func(ctx context.Context, _ time.Duration) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	srv := httptest.NewServer(m)
	defer srv.Close()
	resp := anthropicPost(t, srv.URL, `{"model":"claude","max_tokens":2000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, anthropicHeaders)
	sc := bufio.NewScanner(resp.Body)
	deltas := 0
	for deltas < 3 && sc.Scan() {
		if sc.Text() == "event: content_block_delta" {
			deltas++
			if deltas < 3 {
				gate <- struct{}{}
			}
		}
	}
	resp.Body.Close()
	srv.Close() // waits for the handler to return
	if m.Billed() != 3 {
		t.Fatalf("billed %d, want the 3 tokens written before the cut", m.Billed())
	}
}
