package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// llmRedisConfig is an llm route on the built-in OpenAI mock with a daily
// token quota shared on Redis. The decision deadline is generous: what the
// test measures is the settlement, and the default 30ms is missed by a
// loaded machine, which then answers 503 (fail closed) to most calls. What
// a reply read after the deadline reserved is given back
// (TestLateReplyGivesBackWhatItReserved, limiter/redislimit).
const llmRedisConfig = `
server:
  listen: 127.0.0.1:0
redis:
  addrs: [%s]
  timeout: 500ms
tenants:
  keys:
    sk-test: {tenant: acme, plan: free}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: builtin:openai-mock
    llm: openai
    policies: [daily-tokens]
policies:
  daily-tokens: {key: tenant, cost: tokens, algorithm: fixed_window, rate: %d, window: day, on_missing_key: reject}
`

// Fifty concurrent streams through a real gateway against a token quota
// shared on Redis: every stream admitted is settled to its usage, the
// quota is never exceeded, and Redis holds exactly the sum of the usages.
func TestLLMStreamsOnRedisStayInsideTheQuota(t *testing.T) {
	const quota = 5000
	s := redistest.Start(t)
	g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(llmRedisConfig, s.Addr(), quota)))
	c := clienttest.New(t, 50)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":300,"stream":true,"stream_options":{"include_usage":true}}`

	var admitted, limited, used atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer sk-test")
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				admitted.Add(1)
			case http.StatusTooManyRequests:
				limited.Add(1)
				io.Copy(io.Discard, resp.Body)
				return
			default:
				t.Errorf("got %d, want 200 or 429", resp.StatusCode)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var chunk struct {
					Usage *struct {
						TotalTokens int64 `json:"total_tokens"`
					} `json:"usage"`
				}
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &chunk) == nil && chunk.Usage != nil {
					used.Add(chunk.Usage.TotalTokens)
				}
			}
		}()
	}
	wg.Wait()

	// The gateway settles a stream just after its last byte reached the
	// client, so Redis is polled (for 5s at most) until it holds what the
	// streams used; then it must hold exactly that.
	sum := sha256.Sum256([]byte("acme")) // the key layout docs/redis.md documents
	key := "rl:{daily-tokens:" + hex.EncodeToString(sum[:16]) + "}:fw"
	var held int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		v, err := s.Do("GET", key)
		if err != nil {
			t.Fatal(err)
		}
		if held, _ = strconv.ParseInt(v, 10, 64); held == used.Load() {
			break
		}
		<-time.After(5 * time.Millisecond) // poll Redis: the settlement has no event a test can wait on
	}
	t.Logf("50 concurrent streams reserving %d each from a %d-token daily quota on Redis: %d admitted, %d limited, usages %d, redis holds %d",
		300+8, quota, admitted.Load(), limited.Load(), used.Load(), held)
	if held != used.Load() || held > quota {
		t.Fatalf("redis holds %d tokens, want exactly the usages %d, within the quota %d", held, used.Load(), quota)
	}
	if admitted.Load() < quota/310 {
		t.Fatalf("admitted %d, want at least the %d reservations the quota holds at once", admitted.Load(), quota/310)
	}
}
