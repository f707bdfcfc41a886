package builtin

import "encoding/json"

// A provider renders every value it is sent into what its model reads, and
// Claude's tokenizer is not public: so the Anthropic mock bills the values
// it does not read as its prompt at the worst a byte-level vocabulary can,
// a token a byte (key and value), and the rest at its estimate of a token
// per four bytes. A field Anthropic adds tomorrow is billed by the mock
// today, and so is a tool's input, text whatever its shape (an object
// typed "image" in it is no image).

// anthropicRead are the top-level fields of a Messages request the mock
// reads (as its prompt, its cap or its settings); messageRead those of a
// message.
var (
	anthropicRead = map[string]bool{"model": true, "max_tokens": true, "messages": true, "system": true,
		"stream": true, "tools": true, "tool_choice": true, "temperature": true, "top_p": true, "top_k": true,
		"stop_sequences": true, "metadata": true, "thinking": true, "service_tier": true}
	messageRead = map[string]bool{"role": true, "content": true}
)

// anthropicInputTokens is the prompt the mock bills for body: hiddenBytes at a
// token a byte, the rest at a token per four bytes.
func anthropicInputTokens(body []byte) int {
	hidden := anthropicHiddenBytes(body)
	return (len(body)-hidden+3)/4 + hidden
}

// anthropicHiddenBytes is the bytes of body's members the mock does not
// read, of its messages' members it does not read, and of its tool_use
// blocks' input: disjoint parts of body, so never more than its length.
func anthropicHiddenBytes(body []byte) int {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return 0
	}
	n := 0
	for k, v := range top {
		if !anthropicRead[k] {
			n += len(k) + len(v)
		}
	}
	var messages []map[string]json.RawMessage
	json.Unmarshal(top["messages"], &messages)
	for _, m := range messages {
		for k, v := range m {
			if !messageRead[k] {
				n += len(k) + len(v)
			}
		}
		var blocks []map[string]json.RawMessage
		json.Unmarshal(m["content"], &blocks)
		for _, b := range blocks {
			if string(b["type"]) == `"tool_use"` {
				n += len(b["input"])
			}
		}
	}
	return n
}
