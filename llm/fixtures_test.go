package llm

import "strings"

// prompt1KB is a typical chat prompt of about 1 KB of English.
var prompt1KB = strings.Repeat("The gateway counts the tokens of every prompt before it forwards the request, "+
	"so that a tenant's quota is reserved up front and reconciled afterwards. ", 7)

// chatBody1KB is a chat completions request around prompt1KB.
var chatBody1KB = []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},` +
	`{"role":"user","content":"` + prompt1KB + `"}],"max_tokens":256,"stream":true}`)
