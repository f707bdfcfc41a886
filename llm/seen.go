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
	s := seen{model: model}
	s.scan(body, container)
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

// scan counts, in one pass over the valid JSON object body, what the
// top-level member container holds: each string value whose key (the last
// key before it) is an output key, and an object under "input" or
// "arguments" (Anthropic's tool_use input) by its JSON text.
func (s *seen) scan(body []byte, container string) {
	var key []byte
	depth := 0
	inside := false // within the container's value
	for i := 0; i < len(body); {
		switch body[i] {
		case '{', '[':
			depth++
			i++
			continue
		case '}', ']':
			if depth--; depth <= 1 && inside {
				return // the container is read: nothing after it is output
			}
			i++
			continue
		case '"':
		default:
			i++
			continue
		}
		end := skipString(body, i)
		j := skipSpace(body, end)
		if j < len(body) && body[j] == ':' { // a key
			key = body[i+1 : end-1]
			k := skipSpace(body, j+1)
			if depth == 1 {
				if inside = string(key) == container; !inside && k < len(body) {
					i = skipValue(body, k) // another member: not output
					continue
				}
			}
			if inside && depth > 1 && k < len(body) && body[k] == '{' && (string(key) == "input" || string(key) == "arguments") {
				e := skipValue(body, k)
				s.count(body[k:e])
				i = e
				continue
			}
			i = k
			continue
		}
		if inside && depth > 1 && outputKey(key) {
			if b, ok := plainString(body[i:end]); ok {
				s.count(b)
			} else {
				s.count([]byte(stringValue(body[i:end])))
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
