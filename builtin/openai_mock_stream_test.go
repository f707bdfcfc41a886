package builtin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// failAfter bounds a wait that only a bug would make long; it orders
// nothing.
const failAfter = 10 * time.Second

type sseEvent struct {
	name, data string
}

// readEvent reads one server-sent event: its lines up to the blank one.
func readEvent(br *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && ev == (sseEvent{}) {
				return ev, io.EOF
			}
			return ev, fmt.Errorf("reading event (got %q so far): %w", line, err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			return ev, fmt.Errorf("unexpected line %q", line)
		}
	}
}

func readAllEvents(r io.Reader) ([]sseEvent, error) {
	br := bufio.NewReader(r)
	var evs []sseEvent
	for {
		ev, err := readEvent(br)
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func postStream(ctx context.Context, client *http.Client, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("got %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp, nil
}

type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// chatStream is a chat stream as the client saw it.
type chatStream struct {
	text      string
	deltas    int
	finish    string
	usage     *chatUsage
	nullUsage bool // every chunk before the usage one said "usage": null
}

// checkChatStream parses a chat stream event by event and checks its
// framing: a role chunk first, content deltas, one finish reason, an optional
// usage chunk with no choices, [DONE] last.
func checkChatStream(evs []sseEvent) (chatStream, error) {
	var s chatStream
	if len(evs) < 3 {
		return s, fmt.Errorf("got %d events, want at least 3", len(evs))
	}
	if last := evs[len(evs)-1]; last.data != "[DONE]" {
		return s, fmt.Errorf("last event: got %q, want [DONE]", last.data)
	}
	s.nullUsage = true
	for i, ev := range evs[:len(evs)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			return s, fmt.Errorf("event %d %q: %w", i, ev.data, err)
		}
		if c.Object != "chat.completion.chunk" {
			return s, fmt.Errorf("event %d object: got %q, want chat.completion.chunk", i, c.Object)
		}
		if s.usage != nil {
			return s, fmt.Errorf("event %d follows the usage chunk", i)
		}
		if c.Usage != nil {
			if len(c.Choices) != 0 {
				return s, fmt.Errorf("usage chunk has %d choices, want 0", len(c.Choices))
			}
			s.usage = c.Usage
			continue
		}
		s.nullUsage = s.nullUsage && strings.Contains(ev.data, `"usage":null`)
		if len(c.Choices) != 1 {
			return s, fmt.Errorf("event %d: got %d choices, want 1", i, len(c.Choices))
		}
		ch := c.Choices[0]
		if i == 0 && ch.Delta.Role != "assistant" {
			return s, fmt.Errorf("first chunk's role: got %q, want assistant", ch.Delta.Role)
		}
		if s.finish != "" {
			return s, fmt.Errorf("event %d follows the finish reason", i)
		}
		if ch.FinishReason != nil {
			s.finish = *ch.FinishReason
		}
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			s.text += *ch.Delta.Content
			s.deltas++
		}
	}
	if s.finish == "" {
		return s, errors.New("no finish_reason")
	}
	return s, nil
}

func TestOpenAIMockChatStream(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantTokens int
		wantFinish string
		wantUsage  bool
	}{
		{name: "usage asked", body: `"stream_options":{"include_usage":true}`, wantTokens: 16, wantFinish: "stop", wantUsage: true},
		{name: "usage not asked", body: `"max_tokens":100`, wantTokens: 16, wantFinish: "stop"},
		{name: "usage false", body: `"stream_options":{"include_usage":false}`, wantTokens: 16, wantFinish: "stop"},
		{name: "cut for length with usage", body: `"max_tokens":7,"stream_options":{"include_usage":true}`, wantTokens: 7, wantFinish: "length", wantUsage: true},
		{name: "zero tokens", body: `"max_completion_tokens":0`, wantTokens: 0, wantFinish: "length"},
	}
	srv := newMock(t, OpenAIMockConfig{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := postStream(t.Context(), srv.Client(), srv.URL+"/v1/chat/completions",
				`{"model":"m","stream":true,"messages":`+hello+`,`+tt.body+`}`)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			evs, err := readAllEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			s, err := checkChatStream(evs)
			if err != nil {
				t.Fatal(err)
			}
			if s.deltas != tt.wantTokens || len(strings.Fields(s.text)) != tt.wantTokens {
				t.Errorf("got %d deltas, %d words (%q), want %d", s.deltas, len(strings.Fields(s.text)), s.text, tt.wantTokens)
			}
			if s.finish != tt.wantFinish {
				t.Errorf("finish_reason: got %q, want %q", s.finish, tt.wantFinish)
			}
			if got := s.usage != nil; got != tt.wantUsage {
				t.Fatalf("usage chunk present: got %v, want %v", got, tt.wantUsage)
			}
			if !tt.wantUsage {
				return
			}
			if !s.nullUsage {
				t.Error(`chunks before the usage one lack "usage": null`)
			}
			if u := s.usage; u.PromptTokens != 12 || u.CompletionTokens != tt.wantTokens || u.TotalTokens != 12+tt.wantTokens {
				t.Errorf("usage: got %+v, want prompt 12 completion %d total %d", u, tt.wantTokens, 12+tt.wantTokens)
			}
		})
	}
}

func TestOpenAIMockResponsesStream(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantTokens int
		wantLast   string
		wantStatus string
	}{
		{name: "completed", body: `{"model":"m","input":"Hello there, mock!","stream":true}`,
			wantTokens: 16, wantLast: "response.completed", wantStatus: "completed"},
		{name: "cut at max_output_tokens", body: `{"model":"m","input":"Hello there, mock!","stream":true,"max_output_tokens":5}`,
			wantTokens: 5, wantLast: "response.incomplete", wantStatus: "incomplete"},
	}
	srv := newMock(t, OpenAIMockConfig{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := postStream(t.Context(), srv.Client(), srv.URL+"/v1/responses", tt.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			evs, err := readAllEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var text string
			for i, ev := range evs {
				var e struct {
					Type  string         `json:"type"`
					Seq   int            `json:"sequence_number"`
					Delta string         `json:"delta"`
					Resp  responseObject `json:"response"`
				}
				if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
					t.Fatalf("event %d %q: %v", i, ev.data, err)
				}
				if e.Type != ev.name || e.Seq != i {
					t.Fatalf("event %d: got name %q type %q seq %d, want matching name and type, seq %d", i, ev.name, e.Type, e.Seq, i)
				}
				if e.Type == "response.output_text.delta" {
					text += e.Delta
				}
				if i == len(evs)-1 {
					if e.Resp.Status != tt.wantStatus || e.Resp.Usage == nil {
						t.Fatalf("final response: got status %q usage %v, want %q with usage", e.Resp.Status, e.Resp.Usage, tt.wantStatus)
					}
					if u := e.Resp.Usage; u.InputTokens != 12 || u.OutputTokens != tt.wantTokens || u.TotalTokens != 12+tt.wantTokens {
						t.Errorf("usage: got %+v, want input 12 output %d total %d", u, tt.wantTokens, 12+tt.wantTokens)
					}
				}
				if len(names) == 0 || names[len(names)-1] != e.Type {
					names = append(names, e.Type)
				}
			}
			want := []string{"response.created", "response.in_progress", "response.output_item.added",
				"response.content_part.added", "response.output_text.delta", "response.output_text.done",
				"response.content_part.done", "response.output_item.done", tt.wantLast}
			if strings.Join(names, " ") != strings.Join(want, " ") {
				t.Errorf("event order: got %v, want %v", names, want)
			}
			if got := len(strings.Fields(text)); got != tt.wantTokens {
				t.Errorf("streamed %d words (%q), want %d", got, text, tt.wantTokens)
			}
		})
	}
}

// gatedSleep holds every pause between tokens until open is closed, or
// until the request ends; calls counts the pauses begun.
type gatedSleep struct {
	open   chan struct{}
	once   sync.Once
	paused chan struct{} // receives once per pause begun
}

// release opens the gate; a test that fails early defers it so that no
// handler stays held.
func (g *gatedSleep) release() { g.once.Do(func() { close(g.open) }) }

func newGatedSleep() *gatedSleep {
	return &gatedSleep{open: make(chan struct{}), paused: make(chan struct{}, 1000)}
}

func (g *gatedSleep) sleep(ctx context.Context, _ time.Duration) error {
	g.paused <- struct{}{}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finishing wraps h and closes the returned channel when h returns.
func finishing(h http.Handler) (http.Handler, <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer once.Do(func() { close(done) })
		h.ServeHTTP(w, r)
	}), done
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(failAfter):
		t.Fatalf("%s: nothing after %v", what, failAfter)
	}
}

// TestOpenAIMockStreamFirstChunkEarly reads the first events while the
// handler is held at its first pause between tokens: they can only arrive if
// each event is flushed as it is written.
func TestOpenAIMockStreamFirstChunkEarly(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
		t.Run(path, func(t *testing.T) {
			gate := newGatedSleep()
			h, finished := finishing(OpenAIMock(OpenAIMockConfig{TokensPerSecond: 1000, Sleep: gate.sleep}))
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			defer gate.release()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			body := `{"model":"m","stream":true,"messages":` + hello + `,"input":"hi"}`
			// Without a flush per event not even the headers would come, so
			// the request itself is under the failure deadline.
			type first struct {
				resp *http.Response
				br   *bufio.Reader
				ev   sseEvent
				err  error
			}
			got := make(chan first, 1)
			go func() {
				resp, err := postStream(ctx, srv.Client(), srv.URL+path, body)
				if err != nil {
					got <- first{err: err}
					return
				}
				br := bufio.NewReader(resp.Body)
				ev, err := readEvent(br)
				got <- first{resp, br, ev, err}
			}()
			var br *bufio.Reader
			select {
			case f := <-got:
				if f.resp != nil {
					defer f.resp.Body.Close()
				}
				if f.err != nil {
					t.Fatal(f.err)
				}
				if f.ev.data == "" {
					t.Fatal("first event empty")
				}
				br = f.br
			case <-time.After(failAfter):
				t.Fatalf("no first event after %v while the handler is held: events are buffered", failAfter)
			}
			wait(t, gate.paused, "first pause")
			select {
			case <-finished:
				t.Fatal("handler finished while held at its first pause")
			default:
			}
			gate.release()
			rest, err := readAllEvents(br)
			if err != nil {
				t.Fatal(err)
			}
			if len(rest) < 16 {
				t.Errorf("after the first event got %d more, want at least 16", len(rest))
			}
			wait(t, finished, "handler end")
		})
	}
}

// TestOpenAIMockStreamClientGone hangs up at the first pause between tokens
// and checks that the handler returns without pausing again.
func TestOpenAIMockStreamClientGone(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
		t.Run(path, func(t *testing.T) {
			gate := newGatedSleep() // never opened: only the hang-up ends a pause
			h, finished := finishing(OpenAIMock(OpenAIMockConfig{TokensPerSecond: 1000, Sleep: gate.sleep}))
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			body := `{"model":"m","stream":true,"messages":` + hello + `,"input":"hi"}`
			resp, err := postStream(ctx, srv.Client(), srv.URL+path, body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
				t.Fatal(err)
			}
			wait(t, gate.paused, "first pause")
			cancel()
			wait(t, finished, "handler end after the hang-up")
			if n := len(gate.paused); n != 0 {
				t.Errorf("handler paused %d more times after the hang-up, want 0", n)
			}
		})
	}
}

// TestOpenAIMockConcurrentStreams runs 50 streams at once, each with its
// own length, and checks each one whole.
func TestOpenAIMockConcurrentStreams(t *testing.T) {
	const clients = 50
	srv := newMock(t, OpenAIMockConfig{CompletionTokens: 64})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			n := i%20 + 1
			body := fmt.Sprintf(`{"model":"m","stream":true,"messages":%s,"max_tokens":%d,"stream_options":{"include_usage":%t}}`, hello, n, i%2 == 0)
			resp, err := postStream(t.Context(), srv.Client(), srv.URL+"/v1/chat/completions", body)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			evs, err := readAllEvents(resp.Body)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			s, err := checkChatStream(evs)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			if s.deltas != n || s.finish != "length" || (s.usage != nil) != (i%2 == 0) {
				t.Errorf("client %d: got %d deltas, finish %q, usage %v; want %d, length, usage %v", i, s.deltas, s.finish, s.usage, n, i%2 == 0)
			}
			if s.usage != nil && s.usage.CompletionTokens != n {
				t.Errorf("client %d: completion_tokens got %d, want %d", i, s.usage.CompletionTokens, n)
			}
		})
	}
	wg.Wait()
}
