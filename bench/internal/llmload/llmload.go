// Package llmload is what the benchmarks that put prompts through an llm
// route share: the route's config and the prompts' text.
package llmload

import (
	"math/rand/v2"
	"strings"
)

// Config is a gateway config (fmt verbs: listen address, upstream URL) with
// a tenant's key, sk-bench, and an llm route to the upstream that admits a
// 1 MiB prompt, whose token policy needs the key and is never reached.
const Config = `# an llm route whose policy needs a known key
server:
  listen: %s
admin:
  listen: ""
tenants:
  keys:
    sk-bench: {tenant: bench, plan: free}
routes:
  - name: llm
    match: {path_prefix: /v1/, methods: [POST]}
    upstream: %s
    llm: openai
    max_body_bytes: 2097152
    policies: [tokens]
policies:
  tokens: {key: tenant, cost: tokens, rate: 1000000000000, per: 1s, on_missing_key: reject}
`

// Key is the tenant key Config knows.
const Key = "sk-bench"

// Text is n bytes of English words in a fixed pseudo-random order, the same
// every run.
func Text(n int) string {
	words := strings.Fields("the gateway counts every token of a prompt before it forwards the call so that a tenant " +
		"cannot spend more than its quota allows; limits hold across instances and reloads keep state intact")
	rng := rand.New(rand.NewPCG(7, 11))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}
