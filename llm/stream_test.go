package llm

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// sseCase is a recorded stream, event by event, with what the watcher must
// find in it. usageEvent indexes the usage-only chunk (-1: none to drop).
type sseCase struct {
	name       string
	kind       Kind
	events     []string // each complete with its blank line
	usageEvent int
	usage      Usage
	text       string // the delivered text
}

func chunk(content string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini",` +
		`"choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}],"usage":null}` + "\n\n"
}

const chatUsageEvent = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],` +
	`"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":0}}}` + "\n\n"

var chatUsage = Usage{Input: 12, CachedInput: 8, Output: 4, Total: 16}

var sseCases = []sseCase{
	{
		name: "chat", kind: ChatCompletions,
		events: []string{
			`data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}` + "\n\n",
			chunk("Hello"), chunk(" wor"), chunk("ld! é✓"),
			`data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}` + "\n\n",
			chatUsageEvent,
			"data: [DONE]\n\n",
		},
		usageEvent: 5, usage: chatUsage, text: "Hello world! é✓",
	},
	{
		// No space after "data:", a keep-alive comment, a multi-line data
		// event (the JSON split over two data lines) and tool call deltas.
		name: "chat variants", kind: ChatCompletions,
		events: []string{
			": keep-alive\n\n",
			`data:{"choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n",
			"data: {\"choices\":[{\"index\":0,\n" + `data: "delta":{"tool_calls":[{"index":0,"function":{"name":"get","arguments":"{\"a\":1}"}}]}}]}` + "\n\n",
			"event: chunk\nid: 7\n" + `data: {"choices":[{"index":0,"delta":{"refusal":" no"}}]}` + "\n\n",
			"data:" + chatUsageEvent[len("data: "):],
			"data:[DONE]\n\n",
		},
		usageEvent: 4, usage: chatUsage, text: `Higet{"a":1} no`,
	},
	{
		name: "completions", kind: Completions,
		events: []string{
			`data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":"Once","index":0,"finish_reason":null}],"model":"gpt-3.5-turbo-instruct"}` + "\n\n",
			`data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":" upon","index":0,"finish_reason":"length"}],"model":"gpt-3.5-turbo-instruct"}` + "\n\n",
			`data: {"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n",
			"data: [DONE]\n\n",
		},
		usageEvent: 2, usage: Usage{Input: 3, Output: 2, Total: 5}, text: "Once upon",
	},
	{
		name: "responses", kind: Responses,
		events: []string{
			"event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","usage":null}}` + "\n\n",
			"event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}` + "\n\n",
			"event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" there"}` + "\n\n",
			"event: response.output_text.done\n" + `data: {"type":"response.output_text.done","sequence_number":3,"text":"Hi there"}` + "\n\n",
			"event: response.completed\n" + `data: {"type":"response.completed","sequence_number":4,"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":12}}}` + "\n\n",
		},
		usageEvent: -1, usage: Usage{Input: 10, CachedInput: 4, Output: 2, Total: 12}, text: "Hi there",
	},
	{
		name: "anthropic", kind: AnthropicMessages,
		events: []string{
			"event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":25,"cache_read_input_tokens":100,"output_tokens":1}}}` + "\n\n",
			"event: ping\ndata: {\"type\": \"ping\"}\n\n",
			"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\n\n",
			"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}` + "\n\n",
			"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}` + "\n\n",
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		},
		usageEvent: -1, usage: Usage{Input: 125, CachedInput: 100, Output: 15, Total: 140}, text: "Hello!",
	},
}

// variants yields each case with LF and with CRLF line ends.
func variants(c sseCase) map[string]sseCase {
	crlf := c
	crlf.events = make([]string, len(c.events))
	for i, e := range c.events {
		crlf.events[i] = strings.ReplaceAll(e, "\n", "\r\n")
	}
	return map[string]sseCase{"LF": c, "CRLF": crlf}
}

func (c sseCase) input() []byte { return []byte(strings.Join(c.events, "")) }

// dropped is the input without the usage-only event.
func (c sseCase) dropped() []byte {
	var b strings.Builder
	for i, e := range c.events {
		if i != c.usageEvent {
			b.WriteString(e)
		}
	}
	return []byte(b.String())
}

// watch reads all of r through a watcher and checks what it finds.
func watch(t *testing.T, c sseCase, r io.Reader, drop bool, want []byte) {
	t.Helper()
	w := NewStreamWatcher(r, StreamConfig{Kind: c.kind, Model: "gpt-4o-mini", DropUsageChunk: drop})
	got, err := io.ReadAll(w)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("passed through:\n%q\nwant:\n%q", got, want)
	}
	u, ok := w.Usage()
	if !ok || u != c.usage {
		t.Fatalf("Usage() = %+v, %v; want %+v, true", u, ok, c.usage)
	}
	if got, want := w.Delivered(), CountTokens("gpt-4o-mini", c.text); got != want {
		t.Fatalf("Delivered() = %d, want %d (tokens of %q)", got, want, c.text)
	}
}

func TestStreamWatcherSplits(t *testing.T) {
	for _, base := range sseCases {
		for le, c := range variants(base) {
			in := c.input()
			for _, drop := range []bool{false, true} {
				want := in
				if drop && c.usageEvent >= 0 {
					want = c.dropped()
				}
				name := c.name + "/" + le
				if drop {
					name += "/drop"
				}
				t.Run(name, func(t *testing.T) {
					t.Run("whole", func(t *testing.T) { watch(t, c, bytes.NewReader(in), drop, want) })
					t.Run("one byte per read", func(t *testing.T) {
						watch(t, c, iotest.OneByteReader(bytes.NewReader(in)), drop, want)
					})
					t.Run("every split of two reads", func(t *testing.T) {
						for k := range len(in) + 1 {
							r := io.MultiReader(bytes.NewReader(in[:k]), bytes.NewReader(in[k:]))
							watch(t, c, r, drop, want)
							if t.Failed() {
								t.Fatalf("split at byte %d", k)
							}
						}
					})
				})
			}
		}
	}
}

// fedReader hands out one byte per Read and counts what it has handed out.
type fedReader struct {
	b   []byte
	fed int
}

func (r *fedReader) Read(p []byte) (int, error) {
	if r.fed == len(r.b) {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[r.fed]
	r.fed++
	return 1, nil
}

// TestStreamWatcherNoDelay checks, after every Read, that the watcher has
// passed on everything upstream gave it: all of it without DropUsageChunk,
// and all but the current incomplete line with it.
func TestStreamWatcherNoDelay(t *testing.T) {
	for _, base := range sseCases {
		for le, c := range variants(base) {
			in := c.input()
			t.Run(c.name+"/"+le, func(t *testing.T) {
				up := &fedReader{b: in}
				w := NewStreamWatcher(up, StreamConfig{Kind: c.kind})
				var out []byte
				buf := make([]byte, 64)
				for {
					n, err := w.Read(buf)
					out = append(out, buf[:n]...)
					if !bytes.Equal(out, in[:up.fed]) {
						t.Fatalf("after %d bytes from upstream the reader has %d, want all of them", up.fed, len(out))
					}
					if err != nil {
						break
					}
				}
			})
			if c.usageEvent < 0 {
				continue
			}
			t.Run(c.name+"/"+le+"/drop", func(t *testing.T) {
				usageStart := len(strings.Join(c.events[:c.usageEvent], ""))
				usageEnd := usageStart + len(c.events[c.usageEvent])
				// expected is what the client should have once upstream
				// has handed out fed bytes.
				expected := func(fed int) []byte {
					pre := in[:fed]
					if fed > usageStart {
						pre = append(append([]byte{}, in[:usageStart]...), in[min(fed, usageEnd):fed]...)
					}
					return pre
				}
				up := &fedReader{b: in}
				w := NewStreamWatcher(up, StreamConfig{Kind: c.kind, DropUsageChunk: true})
				var out []byte
				// A buffer larger than the stream, so that each Read hands
				// over everything the watcher has released.
				buf := make([]byte, 64<<10)
				for {
					n, err := w.Read(buf)
					out = append(out, buf[:n]...)
					want := expected(up.fed)
					open := string(in[bytes.LastIndexByte(in[:up.fed], '\n')+1 : up.fed])
					partial := len(open)
					if !strings.HasPrefix("data:", open) && !strings.HasPrefix(open, "data:") && open != "data\r" {
						partial = 0 // a line that cannot be data is never held
					}
					if !bytes.HasPrefix(want, out) || len(want)-len(out) > partial {
						t.Fatalf("after %d bytes from upstream the reader has %q, want %q less at most the %d bytes of the open line",
							up.fed, out, want, partial)
					}
					if err != nil {
						break
					}
				}
				if !bytes.Equal(out, c.dropped()) {
					t.Fatalf("got %q, want %q", out, c.dropped())
				}
			})
		}
	}
}

func TestStreamWatcherCut(t *testing.T) {
	c := sseCases[0]
	in := c.input()
	// Cut inside the third content chunk: the first two reached the client.
	cut := len(strings.Join(c.events[:3], "")) + 20
	for _, drop := range []bool{false, true} {
		w := NewStreamWatcher(bytes.NewReader(in[:cut]), StreamConfig{Kind: ChatCompletions, Model: "gpt-4o-mini", DropUsageChunk: drop})
		got, err := io.ReadAll(w)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, in[:cut]) {
			t.Errorf("drop=%v: passed %q, want %q", drop, got, in[:cut])
		}
		if u, ok := w.Usage(); ok {
			t.Errorf("drop=%v: Usage() = %+v, true; want none", drop, u)
		}
		if got, want := w.Delivered(), CountTokens("gpt-4o-mini", "Hello wor"); got != want || got == 0 {
			t.Errorf("drop=%v: Delivered() = %d, want %d (> 0)", drop, got, want)
		}
		if w.Done() {
			t.Errorf("drop=%v: Done() = true, want false", drop)
		}
	}
}

// TestStreamWatcherDropKeepsEventEnd: when a field of the usage event
// already reached the client, its blank line is kept so that the field
// does not leak into the next event.
func TestStreamWatcherDropKeepsEventEnd(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n"} {
		fix := func(s string) string { return strings.ReplaceAll(s, "\n", eol) }
		in := fix(chunk("a") + "id: 9\n" + chatUsageEvent + "data: [DONE]\n\n")
		want := fix(chunk("a") + "id: 9\n\n" + "data: [DONE]\n\n")
		for k := range len(in) + 1 {
			r := io.MultiReader(strings.NewReader(in[:k]), strings.NewReader(in[k:]))
			w := NewStreamWatcher(r, StreamConfig{Kind: ChatCompletions, DropUsageChunk: true})
			got, err := io.ReadAll(w)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Fatalf("split at %d: got %q, want %q", k, got, want)
			}
			if u, ok := w.Usage(); !ok || u != chatUsage {
				t.Fatalf("split at %d: Usage() = %+v, %v; want %+v, true", k, u, ok, chatUsage)
			}
			if !w.Done() {
				t.Fatalf("split at %d: Done() = false, want true", k)
			}
		}
	}
}

// TestStreamWatcherKeepsUsageWithChoices: a chunk that carries usage and
// content (vLLM's continuous usage, some proxies' last chunk) is never
// dropped; its usage is recorded.
func TestStreamWatcherKeepsUsageWithChoices(t *testing.T) {
	in := `data: {"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}` + "\n\n"
	w := NewStreamWatcher(strings.NewReader(in), StreamConfig{Kind: ChatCompletions, DropUsageChunk: true})
	got, err := io.ReadAll(w)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != in {
		t.Errorf("got %q, want it unchanged", got)
	}
	if u, ok := w.Usage(); !ok || u.Total != 2 {
		t.Errorf("Usage() = %+v, %v; want Total 2", u, ok)
	}
}

// TestStreamWatcherLongLine: a line past the parse bound passes through
// untouched, even in drop mode, and is not parsed.
func TestStreamWatcherLongLine(t *testing.T) {
	long := `data: {"choices":[],"usage":{"prompt_tokens":1},"pad":"` + strings.Repeat("x", maxLineBytes) + `"}` + "\n\n"
	in := long + chunk("ok")
	for _, drop := range []bool{false, true} {
		w := NewStreamWatcher(strings.NewReader(in), StreamConfig{Kind: ChatCompletions, DropUsageChunk: drop})
		got, err := io.ReadAll(w)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != in {
			t.Errorf("drop=%v: got %d bytes, want the %d of the input", drop, len(got), len(in))
		}
		if _, ok := w.Usage(); ok {
			t.Errorf("drop=%v: Usage() ok from an unparsed line, want none", drop)
		}
		if got, want := w.Delivered(), CountTokens("", "ok"); got != want {
			t.Errorf("drop=%v: Delivered() = %d, want %d", drop, got, want)
		}
	}
}

// TestStreamWatcherUpstreamError: an upstream error reaches the reader
// after every byte read before it, held ones included.
func TestStreamWatcherUpstreamError(t *testing.T) {
	in := chunk("a") + `data: {"choices":[]`
	r := io.MultiReader(strings.NewReader(in), iotest.ErrReader(io.ErrUnexpectedEOF))
	w := NewStreamWatcher(r, StreamConfig{Kind: ChatCompletions, DropUsageChunk: true})
	got, err := io.ReadAll(w)
	if err != io.ErrUnexpectedEOF {
		t.Errorf("got error %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if string(got) != in {
		t.Errorf("got %q, want %q", got, in)
	}
}
