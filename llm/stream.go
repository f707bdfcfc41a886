package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// Bounds on what a StreamWatcher keeps to recognise events. A longer line
// or event still passes through untouched; it is only not parsed (its usage
// or text is not recorded), so one hostile chunk cannot grow memory.
const (
	maxLineBytes  = 1 << 20
	maxEventBytes = 1 << 20
	// textFlushBytes is how much delivered text is kept before it is
	// tokenized and dropped; cutting the text there may miscount a token at
	// each cut, which is noise next to a stream this long.
	textFlushBytes = 64 << 10
)

// StreamConfig says how a StreamWatcher reads a stream.
type StreamConfig struct {
	// Kind is the API the stream answers; it decides where usage and text
	// are found. ChatCompletions and Completions read "usage" from chunks,
	// Responses reads response.completed (or .incomplete / .failed),
	// AnthropicMessages reads message_start and message_delta.
	Kind Kind
	// Model picks the vocabulary Delivered counts with (see EncodingFor);
	// pass the request's model.
	Model string
	// DropUsageChunk removes the usage-only chunk (empty choices, usage set)
	// from what the reader sees: set it when WithIncludeUsage added the
	// request for usage, so the client gets the stream it asked for. It
	// applies to ChatCompletions and Completions only; the other kinds
	// always carry their usage inside events the client needs.
	DropUsageChunk bool
	// Meter, when set, enforces the stream (enforce: stream): the watcher
	// passes whole events only, asks Meter before output past what it
	// granted passes, and ends the stream well-formed when it refuses
	// (see enforce.go).
	Meter Meter
	// Granted is the output the stream may deliver before Meter is first
	// asked: what its reservation already holds.
	Granted int64
	// PromptTokens is the prompt's estimate, reported in the usage of a
	// stream the watcher ends when the client asked for usage.
	PromptTokens int64
	// AudioBytesPerToken bounds the output tokens of streamed audio: its
	// decoded bytes over it, rounded up (the family's bound for audio);
	// 0 counts a token a byte.
	AudioBytesPerToken int64
}

// StreamWatcher is an io.ReadCloser over an upstream server-sent-events
// body. It passes the stream through as it arrives: without DropUsageChunk
// each Read reads from upstream straight into the caller's buffer and
// returns every byte it got; with DropUsageChunk it holds back at most the
// current incomplete line, and only while that line may be a data line
// (one that could be the usage chunk). Lines may end in LF or CRLF and be
// split across reads anywhere; "data:" may be followed by a space or not;
// an event's data lines are joined as the SSE specification says.
//
// Read and Close belong to one goroutine (the one copying the body to the
// client). Usage, Delivered and Done are safe to call from any goroutine at
// any time, during or after the stream.
type StreamWatcher struct {
	r    io.Reader
	cfg  StreamConfig
	drop bool // cfg.DropUsageChunk and the kind has a usage-only chunk

	// Line and event assembly, owned by the reading goroutine.
	line          []byte // the current line so far, without its line end
	lineLong      bool   // the current line outgrew maxLineBytes
	data          []byte // the current event's data
	hasData       bool
	dataLong      bool
	hold          []byte // drop mode: the current line's bytes held back
	dropEvent     bool   // drop mode: the rest of the current event is dropped
	passedInEvent bool   // drop mode: some line of the current event was passed
	out           []byte // drop mode: bytes ready for the reader
	outOff        int
	scratch       []byte
	err           error // drop mode: upstream's error, returned once out is drained
	anthropic     wireUsage
	enf           enforcer // Meter's state, owned by the reading goroutine

	mu       sync.Mutex // guards the fields below
	usage    Usage
	hasUsage bool
	done     bool
	text     strings.Builder // delivered text not yet counted
	counted  int64           // tokens of delivered text already counted
	metered  int64           // with a Meter: tokens of every event's text read
	ended    bool            // with a Meter: the watcher ended the stream
	bounded  int64           // delivered output that is not text (audio, an unknown delta), bounded
	failed   bool            // an error event passed
}

// NewStreamWatcher returns a watcher reading the SSE stream r.
func NewStreamWatcher(r io.Reader, cfg StreamConfig) *StreamWatcher {
	w := &StreamWatcher{
		r:    r,
		cfg:  cfg,
		drop: cfg.DropUsageChunk && (cfg.Kind == ChatCompletions || cfg.Kind == Completions),
	}
	if cfg.Meter != nil {
		// Whole events are judged before they pass: the usage chunk is
		// dropped as a whole event too (see readEnforced).
		w.enf.dropUsage, w.drop = w.drop, false
		w.enf.granted = cfg.Granted
	}
	return w
}

// Usage returns the last usage the stream carried; ok is false when none
// has passed (yet).
func (w *StreamWatcher) Usage() (u Usage, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.usage, w.hasUsage
}

// Delivered returns the tokens of the output text that has passed through so
// far (content, refusal, tool call and reasoning-summary deltas), counted in
// the model's vocabulary: what to charge when the stream ends without usage.
// It counts only text of events that were complete (ended by a blank line),
// as only those reach a client's event handler.
func (w *StreamWatcher) Delivered() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return AddSat(AddSat(w.counted, CountTokens(w.cfg.Model, w.text.String())), w.bounded)
}

// Failed reports whether an error event passed (an "error" chunk or event,
// or response.failed): the stream may end without usage after content.
func (w *StreamWatcher) Failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

// Done reports whether the stream's terminal "data: [DONE]" has passed.
func (w *StreamWatcher) Done() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// Close closes the upstream reader when it is an io.Closer.
func (w *StreamWatcher) Close() error {
	if c, ok := w.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Read implements io.Reader; see StreamWatcher for what it passes.
func (w *StreamWatcher) Read(p []byte) (int, error) {
	if w.cfg.Meter != nil {
		return w.readEnforced(p)
	}
	if !w.drop {
		n, err := w.r.Read(p)
		w.scan(p[:n])
		return n, err
	}
	return w.passOut(p, w.fillDropping)
}

// passOut hands p what waits to be passed (w.out), calling fill to read more
// from upstream until something waits or the stream has ended (w.err).
func (w *StreamWatcher) passOut(p []byte, fill func(p []byte)) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if w.outOff < len(w.out) {
			n := copy(p, w.out[w.outOff:])
			w.outOff += n
			if w.outOff == len(w.out) {
				w.out, w.outOff = w.out[:0], 0
			}
			return n, nil
		}
		if w.err != nil {
			return 0, w.err
		}
		fill(p)
	}
}

// readUp reads at most size bytes from upstream into the watcher's scratch
// buffer.
func (w *StreamWatcher) readUp(size int) ([]byte, error) {
	if cap(w.scratch) < size {
		w.scratch = make([]byte, size)
	}
	n, err := w.r.Read(w.scratch[:size])
	return w.scratch[:n], err
}

// fillDropping is passOut's fill in drop mode.
func (w *StreamWatcher) fillDropping(p []byte) {
	// Read no more than p holds, so that what is passed fits p at once
	// unless a held line is released with it.
	b, err := w.readUp(min(len(p), 32<<10))
	w.scan(b)
	if err != nil {
		// The stream ends mid-line: what was held is the client's.
		w.out = append(w.out, w.hold...)
		w.hold = w.hold[:0]
		w.err = err
	}
}

// scan follows b line by line; in drop mode it also decides which bytes
// reach the reader.
func (w *StreamWatcher) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg, complete := b, false
		if i >= 0 {
			seg, complete = b[:i+1], true
		}
		b = b[len(seg):]
		w.segment(seg, complete)
	}
}

func (w *StreamWatcher) segment(seg []byte, complete bool) {
	content := seg
	if complete {
		content = seg[:len(seg)-1]
	}
	if !w.lineLong {
		if len(w.line)+len(content) > maxLineBytes {
			w.lineLong = true
		} else {
			w.line = append(w.line, content...)
		}
	}
	line := bytes.TrimSuffix(w.line, []byte{'\r'})
	if w.drop {
		w.route(seg, complete, line)
	}
	if complete {
		w.handleLine(line)
		w.line, w.lineLong = w.line[:0], false
	}
}

// route decides, in drop mode, what happens to seg: passed, held, or
// dropped with the usage event it belongs to.
func (w *StreamWatcher) route(seg []byte, complete bool, line []byte) {
	blank := complete && len(line) == 0
	switch {
	case w.dropEvent && !w.passedInEvent:
		// Inside the dropped event: all of it goes, its blank line too.
	case w.dropEvent:
		// An earlier line of the dropped event (an id: or event: field)
		// already reached the client, which then needs the blank line
		// that ends the event; the event's other lines go. A lone CR may
		// be the start of that blank line, so it is held.
		w.hold = append(w.hold, seg...)
		if blank {
			w.pass(w.hold, true)
		}
		if complete || string(w.line) != "\r" {
			w.hold = w.hold[:0]
		}
	case !w.lineLong && maybeDataLine(w.line):
		w.hold = append(w.hold, seg...)
		if !complete {
			return
		}
		if w.isUsageOnly(line) {
			w.dropEvent = true
		} else {
			w.pass(w.hold, blank)
		}
		w.hold = w.hold[:0]
	default:
		w.pass(w.hold, false)
		w.hold = w.hold[:0]
		w.pass(seg, blank)
	}
}

func (w *StreamWatcher) pass(b []byte, blank bool) {
	if len(b) == 0 {
		return
	}
	w.out = append(w.out, b...)
	if !blank {
		w.passedInEvent = true
	}
}

// maybeDataLine reports whether a line starting with line may be a data
// field line: a prefix of "data:", or starting with it.
func maybeDataLine(line []byte) bool {
	const data = "data:"
	if len(line) <= len(data) {
		return strings.HasPrefix(data, string(line)) || string(line) == "data\r"
	}
	return string(line[:len(data)]) == data
}

// isUsageOnly reports whether line is the data line of a chunk that carries
// usage and no choices: the chunk stream_options.include_usage adds.
func (w *StreamWatcher) isUsageOnly(line []byte) bool {
	field, value := splitField(line)
	if field != "data" || w.hasData {
		return false
	}
	return usageOnlyData(value)
}

// usageObject reports whether value may hold "usage" set to an object: a
// quick look at the bytes that spares the content chunks ("usage":null, or
// no usage at all) a decode.
func usageObject(value []byte) bool {
	const key = `"usage"`
	for {
		i := bytes.Index(value, []byte(key))
		if i < 0 {
			return false
		}
		value = value[i+len(key):]
		j := skipSpace(value, 0)
		if j < len(value) && value[j] == ':' {
			if k := skipSpace(value, j+1); k < len(value) && value[k] == '{' {
				return true
			}
		}
	}
}

// splitField splits an SSE line into its field name and value, dropping
// one space after the colon, as the specification says.
func splitField(line []byte) (field string, value []byte) {
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return string(line), nil
	}
	value = line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return string(line[:i]), value
}

func (w *StreamWatcher) handleLine(line []byte) {
	if len(line) == 0 {
		if w.hasData && !w.dataLong {
			w.event(w.data)
		}
		w.data, w.hasData, w.dataLong = w.data[:0], false, false
		w.dropEvent, w.passedInEvent = false, false
		return
	}
	if line[0] == ':' { // a comment (keep-alive)
		return
	}
	field, value := splitField(line)
	if field != "data" {
		return
	}
	if w.lineLong || len(w.data)+len(value)+1 > maxEventBytes {
		w.dataLong = true
	}
	if w.dataLong {
		return
	}
	if w.hasData {
		w.data = append(w.data, '\n')
	}
	w.data = append(w.data, value...)
	w.hasData = true
}

// event records what one complete event carries.
func (w *StreamWatcher) event(data []byte) {
	if string(data) == "[DONE]" {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
		return
	}
	switch w.cfg.Kind {
	case ChatCompletions, Completions:
		w.chatEvent(data)
	case Responses:
		w.responsesEvent(data)
	case AnthropicMessages:
		w.anthropicEvent(data)
	}
}

func (w *StreamWatcher) chatEvent(data []byte) {
	var c struct {
		Choices []struct {
			Text  string                     `json:"text"`
			Delta map[string]json.RawMessage `json:"delta"`
		} `json:"choices"`
		Usage       *wireUsage      `json:"usage"`
		ServiceTier json.RawMessage `json:"service_tier"`
		Error       json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range c.Choices {
		w.addText(ch.Text)
		for k, v := range ch.Delta {
			w.chatDelta(k, v)
		}
	}
	if c.Usage != nil {
		w.usage, w.hasUsage = c.Usage.usage(w.cfg.Kind), true
		w.usage.ServiceTier = tierOf(c.ServiceTier)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		w.failed = true
	}
}

// chatDelta meters the member key of a chat delta: every kind of output
// a provider bills (text, refusal, reasoning, tool and function arguments,
// custom tool input, audio) by its count, and any other by its bytes.
// w.mu must be held.
func (w *StreamWatcher) chatDelta(key string, v json.RawMessage) {
	if len(v) == 0 || string(v) == "null" {
		return
	}
	switch key {
	case "role":
		return
	case "content", "refusal", "reasoning_content", "reasoning":
		w.addString(v)
	case "function_call":
		w.addCall(v)
	case "tool_calls":
		var calls []json.RawMessage
		if json.Unmarshal(v, &calls) != nil {
			w.addBounded(int64(len(v)))
			return
		}
		for _, tc := range calls {
			var call struct {
				Function json.RawMessage `json:"function"`
				Custom   json.RawMessage `json:"custom"`
			}
			if json.Unmarshal(tc, &call) != nil {
				w.addBounded(int64(len(tc)))
				continue
			}
			w.addCall(call.Function)
			w.addCall(call.Custom)
		}
	case "audio":
		var a struct {
			Data       string `json:"data"`
			Transcript string `json:"transcript"`
		}
		if json.Unmarshal(v, &a) != nil {
			w.addBounded(int64(len(v)))
			return
		}
		w.addText(a.Transcript)
		w.addAudio(a.Data)
	default:
		w.addBounded(int64(len(v)))
	}
}

// addCall meters a function's or a custom tool's call: its name, and its
// arguments or input. w.mu must be held.
func (w *StreamWatcher) addCall(v json.RawMessage) {
	if len(v) == 0 || string(v) == "null" {
		return
	}
	var f struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Input     string `json:"input"`
	}
	if json.Unmarshal(v, &f) != nil {
		w.addBounded(int64(len(v)))
		return
	}
	w.addText(f.Name)
	w.addText(f.Arguments)
	w.addText(f.Input)
}

// addString meters v as text when it is a string, else by its bytes.
// w.mu must be held.
func (w *StreamWatcher) addString(v json.RawMessage) {
	var s string
	if json.Unmarshal(v, &s) != nil {
		w.addBounded(int64(len(v)))
		return
	}
	w.addText(s)
}

// addAudio meters base64 audio by its decoded bytes (see
// StreamConfig.AudioBytesPerToken). w.mu must be held.
func (w *StreamWatcher) addAudio(data string) {
	if data == "" {
		return
	}
	decoded := int64(len(data))/4*3 + 3
	per := max(w.cfg.AudioBytesPerToken, 1)
	w.addBounded((decoded + per - 1) / per)
}

// addBounded adds n tokens of output that is not text. w.mu must be held.
func (w *StreamWatcher) addBounded(n int64) {
	if n <= 0 {
		return
	}
	if w.cfg.Meter != nil {
		w.metered = AddSat(w.metered, n)
	}
	w.bounded = AddSat(w.bounded, n)
}

// responsesText are the responses stream events whose "delta" is text the
// client receives; audio's is base64 audio. The "delta" of any other event
// is metered by its bytes.
var responsesText = map[string]bool{
	"response.output_text.delta":                true,
	"response.refusal.delta":                    true,
	"response.function_call_arguments.delta":    true,
	"response.custom_tool_call_input.delta":     true,
	"response.reasoning_summary_text.delta":     true,
	"response.reasoning_text.delta":             true,
	"response.audio.transcript.delta":           true,
	"response.mcp_call_arguments.delta":         true,
	"response.code_interpreter_call_code.delta": true,
}

func (w *StreamWatcher) responsesEvent(data []byte) {
	var e struct {
		Type     string          `json:"type"`
		Delta    json.RawMessage `json:"delta"`
		Response *struct {
			Usage       *wireUsage      `json:"usage"`
			ServiceTier json.RawMessage `json:"service_tier"`
		} `json:"response"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case len(e.Delta) == 0 || string(e.Delta) == "null":
	case responsesText[e.Type]:
		w.addString(e.Delta)
	case e.Type == "response.audio.delta":
		var data string
		if json.Unmarshal(e.Delta, &data) != nil {
			w.addBounded(int64(len(e.Delta)))
		} else {
			w.addAudio(data)
		}
	default:
		w.addBounded(int64(len(e.Delta)))
	}
	switch e.Type {
	case "response.completed", "response.incomplete", "response.failed":
		if e.Response != nil && e.Response.Usage != nil {
			w.usage, w.hasUsage = e.Response.Usage.usage(Responses), true
			w.usage.ServiceTier = tierOf(e.Response.ServiceTier)
		}
	}
	if e.Type == "response.failed" || e.Type == "error" {
		w.failed = true
	}
}

func (w *StreamWatcher) anthropicEvent(data []byte) {
	var e struct {
		Type    string `json:"type"`
		Message *struct {
			Usage *wireUsage `json:"usage"`
		} `json:"message"`
		Usage *wireUsage      `json:"usage"`
		Delta json.RawMessage `json:"delta"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e.Type {
	case "message_start":
		if e.Message != nil && e.Message.Usage != nil {
			w.anthropic = *e.Message.Usage
		}
	case "content_block_delta":
		w.anthropicDelta(e.Delta)
	case "error":
		w.failed = true
	case "message_delta":
		if e.Usage == nil {
			return
		}
		// output_tokens is cumulative; the input side (input_tokens and
		// both cache counts) comes from message_start unless this event
		// restates it, as newer API versions do.
		w.anthropic.OutputTokens = e.Usage.OutputTokens
		if e.Usage.InputTokens > 0 {
			w.anthropic.InputTokens = e.Usage.InputTokens
		}
		if e.Usage.CacheCreationInputTokens > 0 {
			w.anthropic.CacheCreationInputTokens = e.Usage.CacheCreationInputTokens
		}
		if e.Usage.CacheReadInputTokens > 0 {
			w.anthropic.CacheReadInputTokens = e.Usage.CacheReadInputTokens
		}
		if e.Usage.CacheCreation != nil {
			w.anthropic.CacheCreation = e.Usage.CacheCreation
		}
		if e.Usage.ServiceTier != "" {
			w.anthropic.ServiceTier = e.Usage.ServiceTier
		}
		w.usage, w.hasUsage = w.anthropic.usage(AnthropicMessages), true
	}
}

// addText keeps delivered text for Delivered; w.mu must be held.
func (w *StreamWatcher) addText(s string) {
	if s == "" {
		return
	}
	if w.cfg.Meter != nil {
		w.metered += CountTokens(w.cfg.Model, s)
	}
	w.text.WriteString(s)
	if w.text.Len() >= textFlushBytes {
		w.counted += CountTokens(w.cfg.Model, w.text.String())
		w.text.Reset()
	}
}

// anthropicDelta meters a content block's delta: text, a tool's input
// JSON and thinking by their count; a signature or a citation (which
// Anthropic does not bill as output) not at all; any other by its bytes.
// w.mu must be held.
func (w *StreamWatcher) anthropicDelta(v json.RawMessage) {
	var d struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
	}
	if len(v) == 0 || json.Unmarshal(v, &d) != nil {
		w.addBounded(int64(len(v)))
		return
	}
	switch d.Type {
	case "text_delta", "input_json_delta", "thinking_delta", "":
		w.addText(d.Text)
		w.addText(d.PartialJSON)
		w.addText(d.Thinking)
	case "signature_delta", "citations_delta":
	default:
		w.addBounded(int64(len(v)))
	}
}
