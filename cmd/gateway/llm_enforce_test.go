package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// billingUpstream streams chat completions one token per chunk at a pace
// and counts what it generated (billed): every chunk it wrote, counted
// when written, as a provider bills what it generated whether or not the
// client read it. cut counts streams that ended because the connection
// closed before their last chunk.
type billingUpstream struct {
	tokens   int
	prompt   int
	interval time.Duration
	billed   atomic.Int64
	cut      atomic.Int64
	served   atomic.Int64
}

func (u *billingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	u.served.Add(1)
	u.billed.Add(int64(u.prompt))
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	send := func(s string) bool {
		if r.Context().Err() != nil {
			return false
		}
		if _, err := io.WriteString(w, "data: "+s+"\n\n"); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	const head = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`
	t := time.NewTicker(u.interval)
	defer t.Stop()
	for range u.tokens {
		select {
		case <-r.Context().Done():
			u.cut.Add(1)
			return
		case <-t.C:
		}
		u.billed.Add(1)
		if !send(head) {
			u.cut.Add(1)
			return
		}
	}
	send(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
	send(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		u.prompt, u.tokens, u.prompt+u.tokens))
	send("[DONE]")
}

// enforceConfig is an enforce: stream route onto url with a daily token
// quota: on Redis (fixed window) when redisAddr is set, in-process
// otherwise.
func enforceConfig(url, redisAddr string, quota, window int) string {
	pol := fmt.Sprintf("{key: tenant, cost: tokens, rate: %d, per: 24h, burst: %d, on_missing_key: reject}", quota, quota)
	redis := ""
	if redisAddr != "" {
		redis = "redis:\n  addrs: [" + redisAddr + "]\n"
		pol = fmt.Sprintf("{key: tenant, cost: tokens, algorithm: fixed_window, rate: %d, window: day, on_missing_key: reject}", quota)
	}
	return fmt.Sprintf(`
server:
  listen: 127.0.0.1:0
%stenants:
  keys:
    sk-test: {tenant: acme, plan: free}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: %s
    llm: openai
    enforce: stream
    stream_window: %d
    policies: [daily-tokens]
policies:
  daily-tokens: %s
`, redis, url, window, pol)
}

// Twenty concurrent streams under enforce: stream, through a real gateway,
// on one instance in-process and on Redis. Each reserves one window, so all
// can be admitted at once where reserving their cap would admit four; as the
// quota runs out each is ended well-formed (finish_reason "length", then
// [DONE]) and its upstream connection closed. What passed never exceeds the
// quota; what the tenant is charged covers what passed, and each stream the
// gateway ended is charged its cap (the provider may finish it), so it stays
// within the quota plus a cap per stream in flight; and the upstream billed
// no more than the tenant was charged plus a window per stream.
func TestEnforcedStreamsStayInsideTheQuota(t *testing.T) {
	const (
		streams = 20
		quota   = 3000
		window  = 32
		tokens  = 400 // each stream's natural length
		maxOut  = 600
	)
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) {
			up := &billingUpstream{tokens: tokens, prompt: 9, interval: time.Millisecond}
			srv := httptest.NewServer(up)
			t.Cleanup(srv.Close)
			var addr string
			var rs *redistest.Server
			if backend == "redis" {
				rs = redistest.Start(t)
				addr = rs.Addr()
			}
			g := startGateway(t, "gateway", writePressureConfig(t, enforceConfig(srv.URL, addr, quota, window)))
			c := clienttest.New(t, streams)
			c.Timeout = 60 * time.Second
			body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"stream":true}`, maxOut)

			var admitted, limited, ended, passed, malformed atomic.Int64
			var wg sync.WaitGroup
			for range streams {
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
					case http.StatusTooManyRequests, http.StatusServiceUnavailable:
						// A machine too loaded to ask Redis in time refuses
						// rather than admits (docs/redis.md "Overload is not
						// failure"; a spend policy fails closed while Redis
						// does not answer); the counts below still hold.
						if limited.Add(1) == 1 {
							b, _ := io.ReadAll(resp.Body)
							t.Logf("first refusal: %d %s", resp.StatusCode, b)
						}
						return
					default:
						b, _ := io.ReadAll(resp.Body)
						t.Errorf("got %d %s, want 200, 429 or 503", resp.StatusCode, b)
						return
					}
					admitted.Add(1)
					var last, finish string
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() {
						data, ok := strings.CutPrefix(sc.Text(), "data: ")
						if !ok {
							continue
						}
						last = data
						var ch struct {
							Choices []struct {
								Delta        struct{ Content string } `json:"delta"`
								FinishReason *string                  `json:"finish_reason"`
							} `json:"choices"`
							Usage json.RawMessage `json:"usage"`
						}
						if data == "[DONE]" || json.Unmarshal([]byte(data), &ch) != nil {
							continue
						}
						if len(ch.Usage) > 0 && string(ch.Usage) != "null" {
							malformed.Add(1) // the client did not ask for usage
						}
						for _, c := range ch.Choices {
							if c.Delta.Content != "" {
								passed.Add(1)
							}
							if c.FinishReason != nil {
								finish = *c.FinishReason
							}
						}
					}
					switch {
					case last != "[DONE]" || (finish != "length" && finish != "stop"):
						malformed.Add(1)
					case finish == "length":
						ended.Add(1)
					}
				}()
			}
			wg.Wait()

			charged := chargedTokens(t, g, rs, quota)
			t.Logf("%d streams of %d tokens, window %d, quota %d (%s): %d admitted, %d limited, %d ended, passed %d, charged %d, upstream billed %d, upstream cut %d",
				streams, tokens, window, quota, backend, admitted.Load(), limited.Load(), ended.Load(), passed.Load(), charged, up.billed.Load(), up.cut.Load())
			if malformed.Load() != 0 {
				t.Fatalf("%d streams malformed, want every stream well-formed", malformed.Load())
			}
			if reserveMode := quota / (9 + maxOut); admitted.Load() <= int64(reserveMode) {
				t.Fatalf("admitted %d, want more than the %d that reserving the cap admits", admitted.Load(), reserveMode)
			}
			if ended.Load() == 0 || up.cut.Load() != ended.Load() {
				t.Fatalf("%d ended, upstream saw %d cut: want some ended and the upstream of each closed", ended.Load(), up.cut.Load())
			}
			bound := int64(streams * window)
			prompts := admitted.Load() * 8 // the gateway's estimate of "hi": 8 tokens
			if passed.Load() > quota || charged < passed.Load()+prompts || charged > quota+streams*maxOut {
				t.Fatalf("passed %d, charged %d: want passed within the quota %d, charged at least passed + prompts (%d) and at most quota + %d",
					passed.Load(), charged, quota, passed.Load()+prompts, streams*maxOut)
			}
			if billed := up.billed.Load(); billed > charged+bound {
				t.Fatalf("upstream billed %d, want at most charged %d + %d", billed, charged, bound)
			}
		})
	}
}

// chargedTokens is what the tenant's quota holds once every stream is
// settled: Redis's counter, or what the quota endpoint says is gone. It
// polls (5s at most): a stream is settled just after its last byte.
func chargedTokens(t *testing.T, g *gateway, rs *redistest.Server, quota int64) int64 {
	t.Helper()
	read := func() int64 {
		if rs != nil {
			sum := sha256.Sum256([]byte("acme"))
			v, err := rs.Do("GET", "rl:{daily-tokens:"+hex.EncodeToString(sum[:16])+"}:fw")
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
		req, _ := http.NewRequest("GET", g.base+"/v1/quota", nil)
		req.Header.Set("Authorization", "Bearer sk-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var q struct {
			Policies []struct {
				Remaining int64 `json:"remaining"`
			} `json:"policies"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || len(q.Policies) != 1 {
			t.Fatalf("quota endpoint: %v %+v", err, q)
		}
		return quota - q.Policies[0].Remaining
	}
	last, stable := read(), 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && stable < 20; {
		<-time.After(10 * time.Millisecond) // poll: the settlement has no event a test can wait on
		if n := read(); n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	return last
}
