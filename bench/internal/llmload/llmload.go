// Package llmload is what the benchmarks that put prompts through an llm
// route share: the route's config, the prompts' text and the small call.
package llmload

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
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
	return compose(n, "the gateway counts every token of a prompt before it forwards the call so that a tenant "+
		"cannot spend more than its quota allows; limits hold across instances and reloads keep state intact",
		func(b *strings.Builder, word func() string, _ *rand.Rand) {
			b.WriteString(word())
			b.WriteByte(' ')
		})
}

// Japanese is at most n bytes of Japanese sentences in a fixed
// pseudo-random order, the same every run: no spaces, a 、 or 。 every few
// words, as a prompt in a language written without spaces has. It ends on
// a whole character.
func Japanese(n int) string {
	return compose(n, "ゲートウェイ は 呼び出し を 転送 する 前に プロンプト の すべて の トークン を 数え "+
		"テナント が 割り当て を 超えて 使う こと は でき ない 制限 は インスタンス を またいで 保たれ 設定 の 再読み込み でも 状態 を 失わ ない",
		func(b *strings.Builder, word func() string, rng *rand.Rand) {
			for range 3 + rng.IntN(6) {
				b.WriteString(word())
			}
			b.WriteString([]string{"。", "、", "、"}[rng.IntN(3)])
		})
}

// compose appends what add makes of vocabulary's words (picked by word, at
// random from a fixed seed) until it has n bytes, and returns the first n,
// less a character cut in two.
func compose(n int, vocabulary string, add func(b *strings.Builder, word func() string, rng *rand.Rand)) string {
	words := strings.Fields(vocabulary)
	rng := rand.New(rand.NewPCG(7, 11))
	word := func() string { return words[rng.IntN(len(words))] }
	var b strings.Builder
	for b.Len() < n {
		add(&b, word, rng)
	}
	s := b.String()[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// SmallBody is a small chat call: 12 prompt tokens, 16 output tokens
// reserved and answered (the mock stops at max_tokens), not streamed.
const SmallBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there, mock!"}],"max_tokens":16}`

// Post posts body to url as tenant Key's JSON call.
func Post(ctx context.Context, client *http.Client, url string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+Key)
	req.Header.Set("Content-Type", "application/json")
	return client.Do(req)
}

// SmallCall times one SmallBody call to url, which must be admitted.
func SmallCall(ctx context.Context, client *http.Client, url string) (time.Duration, error) {
	start := time.Now()
	resp, err := Post(ctx, client, url, strings.NewReader(SmallBody))
	if err != nil {
		return 0, fmt.Errorf("small call: %w", err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("small call answered %d", resp.StatusCode)
	}
	if err != nil {
		return 0, fmt.Errorf("small call: reading the answer: %w", err)
	}
	return time.Since(start), nil
}
