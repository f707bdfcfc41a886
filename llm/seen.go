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
	s.scan(body[m.val:m.end])
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

// scan counts the valid JSON value v in one pass: each string value is
// counted when the key it belongs to (the last key before it) is an output
// key, and an object under "input" or "arguments" (Anthropic's tool_use
// input) by its JSON text.
func (s *seen) scan(v []byte) {
	var key []byte
	for i := 0; i < len(v); {
		if v[i] != '"' {
			i++
			continue
		}
		end := skipString(v, i)
		j := skipSpace(v, end)
		if j < len(v) && v[j] == ':' { // a key
			key = v[i+1 : end-1]
			k := skipSpace(v, j+1)
			if k < len(v) && v[k] == '{' && (string(key) == "input" || string(key) == "arguments") {
				e := skipValue(v, k)
				s.count(v[k:e])
				i = e
				continue
			}
			i = k
			continue
		}
		if outputKey(key) {
			if b, ok := plainString(v[i:end]); ok {
				s.count(b)
			} else {
				s.count([]byte(stringValue(v[i:end])))
			}
		}
		i = end
	}
}

// count adds the tokens of text.
func (s *seen) count(text []byte) {
	if s.enc == "" {
		s.enc = EncodingFor(s.model)
	}
	s.n = AddSat(s.n, countBytesIn(s.enc, text, Pace{}))
}
