package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// A policy that caps spend stays a cap while Redis is down: by default a
// tokens or usd policy refuses (503) what it cannot count, while a
// requests policy beside it lets calls through as before (fail open). 24
// calls at once while Redis is killed: none reaches the upstream on the
// spend routes.
func TestSpendPoliciesFailClosedWhenRedisIsDown(t *testing.T) {
	s := redistest.Start(t)
	client, err := redisclient.New(redisclient.Options{Addrs: []string{s.Addr()}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	mock := builtin.OpenAIMock(builtin.OpenAIMockConfig{})
	up := newUpstream(t, mock).URL
	yaml := `
redis: {addrs: ["` + s.Addr() + `"]}
routes:
  - {name: tokens, upstream: "UPSTREAM", llm: openai, strip_prefix: /tokens, match: {path_prefix: /tokens/}, policies: [tokens]}
  - {name: usd, upstream: "UPSTREAM", llm: openai, strip_prefix: /usd, match: {path_prefix: /usd/}, policies: [usd]}
  - {name: requests, upstream: "UPSTREAM", llm: openai, strip_prefix: /requests, match: {path_prefix: /requests/}, policies: [requests]}
policies:
  tokens: {key: "header:X-Tenant", algorithm: gcra, rate: 100000, per: 1h, cost: tokens}
  usd: {key: "header:X-Tenant", algorithm: gcra, rate: 5, per: 24h, cost: usd}
  requests: {key: "header:X-Tenant", algorithm: gcra, rate: 1000, per: 1m}
prices:
  default: {input: 1, output: 4}
`
	base, _ := gatewayOn(t, yaml, up, engineOn(t, client))
	call := func(prefix string) int {
		req, _ := http.NewRequest("POST", base+prefix+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Tenant", "a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/tokens", "/usd", "/requests"} {
		if got := call(p); got != http.StatusOK {
			t.Fatalf("%s with Redis up: got %d, want 200", p, got)
		}
	}
	s.Kill()
	before := mock.Billed().Calls
	for _, p := range []string{"/tokens", "/usd"} {
		results := make(chan int, 24)
		for range 24 {
			go func() { results <- call(p) }()
		}
		for range 24 {
			if got := <-results; got != http.StatusServiceUnavailable {
				t.Errorf("%s with Redis down: got %d, want 503 (a spend cap fails closed)", p, got)
			}
		}
	}
	if got := mock.Billed().Calls - before; got != 0 {
		t.Errorf("with Redis down the spend routes let %d calls reach the upstream, want 0", got)
	}
	if got := call("/requests"); got != http.StatusOK {
		t.Errorf("/requests with Redis down: got %d, want 200 (a requests policy fails open by default)", got)
	}
}
