package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// windowMeter grants windows of size until limit tokens are granted.
type windowMeter struct {
	window, limit, granted int64
	asked                  int
}

func (m *windowMeter) Extend(total int64) (int64, bool) {
	m.asked++
	for m.granted < total {
		if m.granted+m.window > m.limit {
			return m.granted, false
		}
		m.granted += m.window
	}
	return m.granted, true
}

// closeRecorder is an upstream body that records whether it was closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// longStream is a stream of n one-token words of the kind, with its usage
// and end.
func longStream(kind Kind, n int) string {
	var b strings.Builder
	switch kind {
	case ChatCompletions:
		b.WriteString(`data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
		for range n {
			b.WriteString(`data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" word"}}]}` + "\r\n\r\n")
		}
		b.WriteString(`data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":` + itoa(n) + `}}` + "\n\n")
		b.WriteString("data: [DONE]\n\n")
	case Responses:
		b.WriteString("event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"r1","object":"response","model":"gpt-4o-mini","status":"in_progress","output":[]}}` + "\n\n")
		for i := range n {
			b.WriteString("event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","sequence_number":` + itoa(i+1) + `,"delta":" word"}` + "\n\n")
		}
		b.WriteString("event: response.completed\n" + `data: {"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":` + itoa(n) + `}}}` + "\n\n")
	case AnthropicMessages:
		b.WriteString("event: message_start\n" + `data: {"type":"message_start","message":{"id":"m1","model":"claude","usage":{"input_tokens":5,"output_tokens":1}}}` + "\n\n")
		b.WriteString("event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n")
		for range n {
			b.WriteString("event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" word"}}` + "\n\n")
		}
		b.WriteString("event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n")
		b.WriteString("event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":` + itoa(n) + `}}` + "\n\n")
		b.WriteString("event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n")
	}
	return b.String()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// dataEvents returns the JSON data of each event of a stream, [DONE] as a
// string.
func dataEvents(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range strings.Split(strings.ReplaceAll(stream, "\r\n", "\n"), "\n\n") {
		data := string(eventData([]byte(ev)))
		switch data {
		case "":
			continue
		case "[DONE]":
			out = append(out, map[string]any{"done": true})
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %q is not JSON: %v", ev, err)
		}
		out = append(out, m)
	}
	return out
}

// A stream that would pass what the meter grants is ended at an event
// boundary with its API's own end, its upstream is closed, and the text
// that passed is within what was granted; read a byte at a time or whole.
func TestEnforcedStreamEndsWellFormed(t *testing.T) {
	for _, kind := range []Kind{ChatCompletions, Responses, AnthropicMessages} {
		for _, oneByte := range []bool{false, true} {
			t.Run(kind.String()+map[bool]string{true: " bytewise"}[oneByte], func(t *testing.T) {
				up := &closeRecorder{Reader: strings.NewReader(longStream(kind, 100))}
				var r io.Reader = up
				if oneByte {
					r = iotest.OneByteReader(up)
				}
				m := &windowMeter{window: 8, limit: 30, granted: 8}
				w := NewStreamWatcher(struct {
					io.Reader
					io.Closer
				}{r, up}, StreamConfig{Kind: kind, Model: "gpt-4o-mini", Meter: m, Granted: 8, DropUsageChunk: true, PromptTokens: 5})
				got, err := io.ReadAll(w)
				if err != nil {
					t.Fatal(err)
				}
				if !w.Ended() || !up.closed {
					t.Fatalf("ended %v, upstream closed %v: want both", w.Ended(), up.closed)
				}
				passed := int64(strings.Count(string(got), " word"))
				if passed > m.limit || passed < m.limit-m.window {
					t.Fatalf("%d words passed, want between %d and the %d granted", passed, m.limit-m.window, m.limit)
				}
				if w.Metered() != passed+1 {
					t.Fatalf("metered %d, want the %d that passed and the one refused", w.Metered(), passed+1)
				}
				evs := dataEvents(t, string(got))
				last := evs[len(evs)-1]
				switch kind {
				case ChatCompletions:
					fin := evs[len(evs)-2]["choices"].([]any)[0].(map[string]any)
					if last["done"] != true || fin["finish_reason"] != "length" || evs[len(evs)-2]["id"] != "c1" {
						t.Fatalf("stream ends %v, %v: want finish_reason length then [DONE]", evs[len(evs)-2], last)
					}
				case Responses:
					resp := last["response"].(map[string]any)
					if last["type"] != "response.incomplete" || resp["status"] != "incomplete" || resp["id"] != "r1" {
						t.Fatalf("stream ends %v: want response.incomplete", last)
					}
					if seq := last["sequence_number"].(float64); seq != float64(passed+1) {
						t.Fatalf("sequence_number %v, want %d", seq, passed+1)
					}
				case AnthropicMessages:
					delta := evs[len(evs)-2]
					if last["type"] != "message_stop" || delta["delta"].(map[string]any)["stop_reason"] != "max_tokens" ||
						evs[len(evs)-3]["type"] != "content_block_stop" {
						t.Fatalf("stream ends %v %v %v: want content_block_stop, message_delta max_tokens, message_stop", evs[len(evs)-3], delta, last)
					}
					if out := delta["usage"].(map[string]any)["output_tokens"].(float64); out != float64(passed) {
						t.Fatalf("message_delta output_tokens %v, want %d", out, passed)
					}
				}
			})
		}
	}
}

// A stream within its grant passes byte for byte (the usage chunk the
// client did not ask for aside), asking the meter only as windows run out.
func TestEnforcedStreamWithinGrantPasses(t *testing.T) {
	for _, kind := range []Kind{ChatCompletions, Responses, AnthropicMessages} {
		t.Run(kind.String(), func(t *testing.T) {
			in := longStream(kind, 40)
			m := &windowMeter{window: 16, limit: 1000, granted: 16}
			w := NewStreamWatcher(iotest.HalfReader(strings.NewReader(in)), StreamConfig{Kind: kind, Model: "gpt-4o-mini", Meter: m, Granted: 16})
			got, err := io.ReadAll(w)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, []byte(in)) || w.Ended() {
				t.Fatalf("got %d bytes (ended %v), want the %d of the stream unchanged", len(got), w.Ended(), len(in))
			}
			if m.asked != 2 || m.granted != 48 {
				t.Fatalf("meter asked %d times, granted %d: want 2 and 48 for 40 tokens in windows of 16", m.asked, m.granted)
			}
			if _, ok := w.Usage(); !ok {
				t.Fatal("usage not recorded")
			}
		})
	}
	t.Run("usage chunk dropped", func(t *testing.T) {
		in := longStream(ChatCompletions, 3)
		w := NewStreamWatcher(strings.NewReader(in), StreamConfig{Kind: ChatCompletions, Meter: &windowMeter{window: 8, limit: 8, granted: 8}, Granted: 8, DropUsageChunk: true})
		got, _ := io.ReadAll(w)
		if strings.Contains(string(got), `"usage"`) || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
			t.Fatalf("got %q: want the stream without its usage chunk", got)
		}
		if u, ok := w.Usage(); !ok || u.Output != 3 {
			t.Fatalf("usage %+v %v, want it read", u, ok)
		}
	})
}

// FuzzEnforcedStream feeds arbitrary streams, split at an arbitrary point,
// to every kind under a Meter granting limit tokens: within the grant the
// stream passes unchanged; past it, what passes is the stream up to an
// event's end, then the ending; nothing panics.
func FuzzEnforcedStream(f *testing.F) {
	for _, c := range sseCases {
		in := []byte(strings.Join(c.events, ""))
		f.Add(in, uint16(len(in)/2), uint8(c.kind), uint8(2))
	}
	f.Add([]byte(longStream(AnthropicMessages, 5)), uint16(40), uint8(AnthropicMessages), uint8(3))
	f.Add([]byte(longStream(Responses, 5)), uint16(7), uint8(Responses), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, split uint16, kind uint8, limit uint8) {
		k := Kind(kind%5 + 1)
		at := int(split) % (len(in) + 1)
		r := io.MultiReader(bytes.NewReader(in[:at]), bytes.NewReader(in[at:]))
		m := &windowMeter{window: 1, limit: int64(limit), granted: 1}
		w := NewStreamWatcher(r, StreamConfig{Kind: k, Model: "gpt-4o-mini", Meter: m, Granted: 1})
		out, err := io.ReadAll(w)
		if err != nil {
			t.Fatalf("ReadAll: %v", err)
		}
		if !w.Ended() {
			if !bytes.Equal(out, in) {
				t.Fatalf("within the grant the stream changed:\n%q\nwant\n%q", out, in)
			}
			return
		}
		n := 0
		for n < len(out) && n < len(in) && out[n] == in[n] {
			n++
		}
		for n > 0 && !eventBoundary(in[:n]) {
			n--
		}
		if tail := out[n:]; len(tail) > 0 && !bytes.HasPrefix(tail, []byte("data: ")) && !bytes.HasPrefix(tail, []byte("event: ")) {
			t.Fatalf("after %d bytes of the stream came %q, want an ending", n, tail)
		}
	})
}

// eventBoundary reports whether b ends with the blank line that ends an
// event.
func eventBoundary(b []byte) bool {
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return false
	}
	line := bytes.TrimSuffix(b[:len(b)-1], []byte{'\r'})
	return len(line) == 0 || line[len(line)-1] == '\n'
}

// A chat stream whose client asked for usage gets, when ended, a usage
// chunk of the prompt's estimate and the output that passed before [DONE].
func TestEnforcedStreamEndsWithTheUsageAskedFor(t *testing.T) {
	m := &windowMeter{window: 8, limit: 20, granted: 8}
	w := NewStreamWatcher(strings.NewReader(longStream(ChatCompletions, 50)),
		StreamConfig{Kind: ChatCompletions, Model: "gpt-4o-mini", Meter: m, Granted: 8, PromptTokens: 11})
	got, err := io.ReadAll(w)
	if err != nil {
		t.Fatal(err)
	}
	evs := dataEvents(t, string(got))
	passed := float64(strings.Count(string(got), " word"))
	u, _ := evs[len(evs)-2]["usage"].(map[string]any)
	if evs[len(evs)-1]["done"] != true || u["prompt_tokens"] != 11.0 || u["completion_tokens"] != passed || u["total_tokens"] != 11+passed {
		t.Fatalf("ends %v %v: want the usage (11 + %v) then [DONE]", evs[len(evs)-2], evs[len(evs)-1], passed)
	}
}
