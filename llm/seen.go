package llm

// SeenOutput counts the output a JSON answer of kind shows its client, in
// model's vocabulary: the text, refusal, reasoning, transcript, and tool
// arguments or input of its choices (chat, completions), its output items
// (responses) or its content blocks (Anthropic). A call is charged at least
// this, whatever its usage says. body must be valid JSON (an answer
// ParseUsage read); 0 for anything else. It is safe for concurrent use.
func SeenOutput(kind Kind, model string, body []byte) int64 {
	var container string
	switch kind {
	case ChatCompletions, Completions:
		container = "choices"
	case Responses:
		container = "output"
	case AnthropicMessages:
		container = "content"
	default:
		return 0
	}
	open := skipSpace(body, 0)
	if open >= len(body) || body[open] != '{' {
		return 0
	}
	var buf [16]member
	m, ok := last(appendMembers(buf[:0], body, open), container)
	if !ok {
		return 0
	}
	s := seen{model: model}
	s.value(body[m.val:m.end], nil)
	return s.n
}

// seen sums the output of one answer.
type seen struct {
	model string
	enc   Encoding
	n     int64
}

// outputKey says the strings of key are output a provider bills.
func outputKey(key []byte) bool {
	switch string(key) {
	case "content", "text", "refusal", "reasoning_content", "reasoning", "arguments", "input", "transcript", "thinking":
		return true
	}
	return false
}

// value counts the valid JSON value v, found under key.
func (s *seen) value(v []byte, key []byte) {
	switch v[0] {
	case '"':
		if !outputKey(key) {
			return
		}
		if s.enc == "" {
			s.enc = EncodingFor(s.model)
		}
		if b, ok := plainString(v); ok {
			s.n = AddSat(s.n, countBytesIn(s.enc, b, Pace{}))
		} else {
			s.n = AddSat(s.n, countIn(s.enc, stringValue(v), Pace{}))
		}
	case '[':
		eachElement(v, func(e []byte) bool {
			s.value(e, key)
			return true
		})
	case '{':
		if string(key) == "input" || string(key) == "arguments" {
			// A tool's input as an object (Anthropic's tool_use): the
			// model wrote its JSON.
			if s.enc == "" {
				s.enc = EncodingFor(s.model)
			}
			s.n = AddSat(s.n, countBytesIn(s.enc, v, Pace{}))
			return
		}
		var buf [8]member
		for _, m := range appendMembers(buf[:0], v, 0) {
			s.value(v[m.val:m.end], m.key)
		}
	}
}
