package proxy

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/llm"
)

const outputKindsYAML = `
REDIS
routes:
  - {name: llm, upstream: "UPSTREAM", llm: openai, enforce: stream, stream_window: 16, match: {path_prefix: /v1/}, policies: [quota]}
policies:
  quota: {key: "header:X-Tenant", algorithm: ALGO, rate: 5000, per: 1h, cost: tokens}
`

// Under enforce: stream, every kind of output a provider bills is metered:
// 64 streams at once of 500 tokens each (32,000 in all) in one delta kind,
// on one instance and on two sharing a real Redis, against a quota of
// 5,000 tokens, through answers in gzip (the mock's, asked for by the
// gateway). What passes to the clients never exceeds the quota, whatever
// the kind (an unmetered kind would pass all 32,000); and what the mock
// billed, every accepted call whole as a provider that finishes a
// generation its client left, stays within the bound of enforce: stream,
// the quota plus each admitted stream's cap less one window.
func TestEnforcedStreamsMeterEveryOutputKind(t *testing.T) {
	mock := builtin.OpenAIMock(builtin.OpenAIMockConfig{
		CompletionTokens: 500,
		CountTokens:      func(model, s string) int { return int(llm.CountTokens(model, s)) },
	})
	up := newUpstream(t, mock).URL
	kinds := []string{"content", "refusal", "reasoning_content", "function_call", "custom", "audio"}
	for _, topo := range []string{"one instance", "two instances on redis"} {
		t.Run(topo, func(t *testing.T) {
			engines, redisLine, algo := accountingTopology(t, topo)
			yaml := strings.NewReplacer("REDIS", redisLine, "ALGO", algo).Replace(outputKindsYAML)
			var bases []string
			for _, e := range engines {
				base, _ := gatewayOn(t, yaml, up, e)
				bases = append(bases, base)
			}
			for _, kind := range kinds {
				t.Run(kind, func(t *testing.T) {
					before := mock.Billed()
					var passed, admitted atomic.Int64
					var wg sync.WaitGroup
					client := &http.Client{Timeout: 30 * time.Second}
					for i := range accountingCalls {
						wg.Add(1)
						go func() {
							defer wg.Done()
							body := `{"model":"gpt-4o-mini","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"go"}]}`
							req, _ := http.NewRequest(http.MethodPost, bases[i%len(bases)]+"/v1/chat/completions", strings.NewReader(body))
							req.Header.Set("Content-Type", "application/json")
							req.Header.Set("Accept-Encoding", "br, gzip, deflate")
							req.Header.Set("X-Tenant", topo+"/"+kind)
							req.Header.Set(builtin.MockDeltaHeader, kind)
							resp, err := client.Do(req)
							if err != nil {
								t.Error(err)
								return
							}
							defer resp.Body.Close()
							if resp.StatusCode != http.StatusOK {
								return
							}
							admitted.Add(1)
							sc := bufio.NewScanner(resp.Body)
							sc.Buffer(nil, 1<<20)
							for sc.Scan() {
								data, ok := strings.CutPrefix(sc.Text(), "data: ")
								if !ok || data == "[DONE]" {
									continue
								}
								var ch struct {
									Choices []struct {
										Delta map[string]json.RawMessage `json:"delta"`
									} `json:"choices"`
								}
								if json.Unmarshal([]byte(data), &ch) != nil {
									t.Errorf("event %q is not JSON: the client got compressed bytes?", data)
									return
								}
								for _, c := range ch.Choices {
									for k, v := range c.Delta {
										if k != "role" && string(v) != `""` {
											passed.Add(1) // one word, one token
										}
									}
								}
							}
						}()
					}
					wg.Wait()
					t.Logf("%s: %d admitted, %d tokens passed of a 5,000 quota", kind, admitted.Load(), passed.Load())
					if admitted.Load() == 0 || passed.Load() == 0 || passed.Load() > 5000 {
						t.Errorf("%d admitted, %d passed: want streams admitted and what passed within the quota 5,000", admitted.Load(), passed.Load())
					}
					billed := mock.Billed().Total() - before.Total()
					if bound := 5000 + admitted.Load()*(1000-16); billed > bound {
						t.Errorf("the mock billed %d, past the bound %d", billed, bound)
					}
				})
			}
		})
	}
}
