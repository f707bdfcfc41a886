package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
)

// Meter grants an enforced stream its output as it flows (enforce: stream):
// the proxy's implementation takes windows of tokens from the tenant's
// policies.
type Meter interface {
	// Extend is asked before an event passes whose text would take the
	// output read so far to total tokens, more than granted so far. It
	// returns the output now granted (at least total when ok), or ok false
	// when the tenant has no more: the watcher then ends the stream.
	Extend(total int64) (granted int64, ok bool)
}

// maxChoicesSeen bounds the choice indexes an enforcer remembers to end
// (n is at most 128).
const maxChoicesSeen = 128

// enforcer is a StreamWatcher's state under a Meter, owned by the reading
// goroutine.
type enforcer struct {
	granted   int64
	passed    int64 // tokens of the text of events that passed
	dropUsage bool  // drop the usage-only chunk (chat and completions)
	pending   []byte
	lineStart int // where the current line of pending starts
	scanFrom  int // where to look for the next line end

	// What a well-formed end repeats of the stream.
	id, object, model string
	created           int64
	choices           []int
	response          json.RawMessage // responses: the response object as created
	seq               int64           // responses: the last sequence_number
	open              []int           // anthropic: content blocks started, not stopped
}

// Ended reports whether the watcher ended the stream because its Meter
// refused more output.
func (w *StreamWatcher) Ended() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended
}

// Metered returns, under a Meter, the tokens of the text of every complete
// event read from upstream: what passed, and the event that was refused.
func (w *StreamWatcher) Metered() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.metered
}

// readEnforced is Read under a Meter: events pass whole, each once the
// output it takes the stream to is granted.
func (w *StreamWatcher) readEnforced(p []byte) (int, error) {
	return w.passOut(p, w.fillEnforced)
}

// fillEnforced is passOut's fill under a Meter.
func (w *StreamWatcher) fillEnforced([]byte) {
	b, err := w.readUp(32 << 10)
	w.enf.pending = append(w.enf.pending, b...)
	w.takeEvents()
	if err != nil && w.err == nil {
		// The upstream ended inside an event: a client's parser drops it
		// unfinished, so it passes as it is.
		w.scan(w.enf.pending)
		w.out = append(w.out, w.enf.pending...)
		w.enf.pending = nil
		w.err = err
	}
}

// takeEvents judges every complete event in pending.
func (w *StreamWatcher) takeEvents() {
	e := &w.enf
	for w.err == nil {
		end := e.eventEnd()
		if end < 0 {
			if len(e.pending) > maxEventBytes {
				// Too long to keep: it passes unjudged, as in the other
				// modes, and the usage settles it.
				w.scan(e.pending)
				w.out = append(w.out, e.pending...)
				e.pending, e.lineStart, e.scanFrom = e.pending[:0], 0, 0
			}
			return
		}
		if !w.judge(e.pending[:end]) {
			return
		}
		rest := copy(e.pending, e.pending[end:])
		e.pending, e.lineStart, e.scanFrom = e.pending[:rest], 0, 0
	}
}

// eventEnd returns the offset just past the blank line that ends the first
// event in pending, or -1 when it has not arrived yet.
func (e *enforcer) eventEnd() int {
	for {
		i := bytes.IndexByte(e.pending[e.scanFrom:], '\n')
		if i < 0 {
			e.scanFrom = len(e.pending)
			return -1
		}
		i += e.scanFrom
		line := bytes.TrimSuffix(e.pending[e.lineStart:i], []byte{'\r'})
		e.lineStart, e.scanFrom = i+1, i+1
		if len(line) == 0 {
			return i + 1
		}
	}
}

// judge passes the complete event ev when the output it takes the stream
// to is granted, and otherwise ends the stream and reports false.
func (w *StreamWatcher) judge(ev []byte) bool {
	data := eventData(ev)
	usageOnly := w.enf.dropUsage && usageOnlyData(data)
	w.scan(ev)
	w.mu.Lock()
	total := w.metered
	w.mu.Unlock()
	if total > w.enf.granted {
		granted, ok := w.cfg.Meter.Extend(total)
		if !ok {
			w.end()
			return false
		}
		w.enf.granted = granted
	}
	w.enf.passed = total
	w.enf.note(w.cfg.Kind, data) // the client's view: what passed
	if !usageOnly {
		w.out = append(w.out, ev...)
	}
	return true
}

// end closes the upstream (it stops generating, and billing) and gives the
// client the end its API has for a response cut at its output limit.
func (w *StreamWatcher) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	_ = w.Close()
	w.out = append(w.out, w.enf.ending(w.cfg)...)
	w.enf.pending = nil
	w.err = io.EOF
}

// eventData joins the data lines of one complete event.
func eventData(ev []byte) []byte {
	var data []byte
	n := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		field, value := splitField(bytes.TrimSuffix(line, []byte{'\r'}))
		if field != "data" {
			continue
		}
		if n > 0 {
			data = append(data, '\n')
		}
		data = append(data, value...)
		n++
	}
	return data
}

// note keeps what a well-formed end repeats of the stream.
func (e *enforcer) note(kind Kind, data []byte) {
	if len(data) == 0 || data[0] != '{' {
		return
	}
	var ev struct {
		ID       string                `json:"id"`
		Object   string                `json:"object"`
		Created  int64                 `json:"created"`
		Model    string                `json:"model"`
		Choices  []struct{ Index int } `json:"choices"`
		Type     string                `json:"type"`
		Seq      int64                 `json:"sequence_number"`
		Response json.RawMessage       `json:"response"`
		Index    int                   `json:"index"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch kind {
	case ChatCompletions, Completions:
		if e.id == "" {
			e.id, e.object, e.created, e.model = ev.ID, ev.Object, ev.Created, ev.Model
		}
		for _, c := range ev.Choices {
			if !slices.Contains(e.choices, c.Index) && len(e.choices) < maxChoicesSeen {
				e.choices = append(e.choices, c.Index)
			}
		}
	case Responses:
		e.seq = max(e.seq, ev.Seq)
		if (ev.Type == "response.created" || ev.Type == "response.in_progress") && len(ev.Response) > 0 {
			e.response = slices.Clone(ev.Response)
		}
	case AnthropicMessages:
		switch ev.Type {
		case "content_block_start":
			if len(e.open) < maxChoicesSeen {
				e.open = append(e.open, ev.Index)
			}
		case "content_block_stop":
			if i := slices.Index(e.open, ev.Index); i >= 0 {
				e.open = slices.Delete(e.open, i, i+1)
			}
		}
	}
}

// ending is the end of a stream cut at its output limit, as each API sends
// it: chat's and completions' final chunk of every choice with finish_reason
// "length" (and the usage chunk when the client asked for it) and [DONE];
// the Responses API's response.incomplete; Anthropic's content_block_stop
// of each open block, message_delta with stop_reason "max_tokens", and
// message_stop.
func (e *enforcer) ending(cfg StreamConfig) []byte {
	var out []byte
	event := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			return // plain maps and strings: cannot happen
		}
		if name != "" {
			out = append(out, "event: "+name+"\n"...)
		}
		out = append(append(append(out, "data: "...), b...), "\n\n"...)
	}
	switch cfg.Kind {
	case ChatCompletions, Completions:
		object := e.object
		if object == "" {
			object = map[Kind]string{ChatCompletions: "chat.completion.chunk", Completions: "text_completion"}[cfg.Kind]
		}
		choices := e.choices
		if len(choices) == 0 {
			choices = []int{0}
		}
		for _, i := range choices {
			choice := map[string]any{"index": i, "logprobs": nil, "finish_reason": "length"}
			if cfg.Kind == ChatCompletions {
				choice["delta"] = map[string]any{}
			} else {
				choice["text"] = ""
			}
			event("", map[string]any{"id": e.id, "object": object, "created": e.created, "model": e.model,
				"choices": []any{choice}})
		}
		if !e.dropUsage {
			event("", map[string]any{"id": e.id, "object": object, "created": e.created, "model": e.model,
				"choices": []any{}, "usage": map[string]int64{
					"prompt_tokens": cfg.PromptTokens, "completion_tokens": e.passed,
					"total_tokens": cfg.PromptTokens + e.passed,
				}})
		}
		out = append(out, "data: [DONE]\n\n"...)
	case Responses:
		resp := map[string]any{}
		if json.Unmarshal(e.response, &resp) != nil || resp == nil {
			resp = map[string]any{"object": "response", "model": cfg.Model, "output": []any{}}
		}
		resp["status"] = "incomplete"
		resp["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
		resp["usage"] = map[string]int64{
			"input_tokens": cfg.PromptTokens, "output_tokens": e.passed,
			"total_tokens": cfg.PromptTokens + e.passed,
		}
		event("response.incomplete", map[string]any{"type": "response.incomplete", "sequence_number": e.seq + 1, "response": resp})
	case AnthropicMessages:
		for _, i := range e.open {
			event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
		}
		event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": "max_tokens", "stop_sequence": nil},
			"usage": map[string]int64{"output_tokens": e.passed}})
		event("message_stop", map[string]string{"type": "message_stop"})
	}
	return out
}

// usageOnlyData reports whether an event's data is a chunk that carries
// usage and no choices: the chunk stream_options.include_usage adds. Keys
// are matched exactly (encoding/json's struct decoding folds case): only
// the chunk the upstream means as usage is dropped.
func usageOnlyData(value []byte) bool {
	if len(value) == 0 || value[0] != '{' || !usageObject(value) {
		return false
	}
	var c map[string]json.RawMessage
	if err := json.Unmarshal(value, &c); err != nil {
		return false
	}
	var choices []json.RawMessage
	if ch, ok := c["choices"]; ok && json.Unmarshal(ch, &choices) != nil {
		return false
	}
	u := c["usage"]
	return len(choices) == 0 && len(u) > 0 && u[0] == '{'
}
