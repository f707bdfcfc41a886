package proxy

import (
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
)

const anthropicAccountingYAML = `
REDIS
routes:
  - {name: claude, upstream: "UPSTREAM", llm: anthropic, upstream_api_key: sk-operator, match: {path_prefix: /v1/}, policies: [quota]}
policies:
  quota: {key: "header:X-Tenant", algorithm: ALGO, rate: 5000, per: 1h, cost: output_tokens}
`

// On an Anthropic route, each case is sent 64 times at once, on one
// instance and on two sharing a real Redis: messages stay within the
// output quota by what the mock sent, count_tokens is free, and message
// batches and an unknown endpoint never reach the upstream.
func TestAnthropicEndpointsAtSixtyFourCalls(t *testing.T) {
	mock := builtin.NewAnthropicMock(builtin.AnthropicMockConfig{CompletionTokens: 200})
	var reached atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		mock.ServeHTTP(w, r)
	})).URL
	msg := func(int) string {
		return `{"model":"claude-sonnet-4-5","max_tokens":300,"messages":[{"role":"user","content":"Tell me about rate limits."}]}`
	}
	cases := []accountingCase{
		{name: "messages", path: "/v1/messages", body: msg},
		{name: "count_tokens", path: "/v1/messages/count_tokens", body: msg},
		{name: "message batches", path: "/v1/messages/batches", refused: http.StatusForbidden, body: msg},
		{name: "batch results", method: http.MethodGet, path: "/v1/messages/batches/b1/results", refused: http.StatusForbidden, body: func(int) string { return "" }},
		{name: "an OpenAI endpoint", path: "/v1/chat/completions", refused: http.StatusNotFound, body: msg},
		// Remote MCP tools bill their results as input, unseen: refused
		// as OpenAI's mcp tool is.
		{name: "mcp_servers", path: "/v1/messages", refused: http.StatusBadRequest, body: func(int) string {
			return `{"model":"claude-sonnet-4-5","max_tokens":300,"messages":[{"role":"user","content":"news?"}],` +
				`"mcp_servers":[{"type":"url","url":"https://mcp.example.com/sse","name":"x"}]}`
		}},
	}
	for _, topo := range []string{"one instance", "two instances on redis"} {
		t.Run(topo, func(t *testing.T) {
			engines, redisLine, algo := accountingTopology(t, topo)
			yaml := strings.NewReplacer("REDIS", redisLine, "ALGO", algo).Replace(anthropicAccountingYAML)
			var bases []string
			for _, e := range engines {
				base, _ := gatewayOn(t, yaml, up, e)
				bases = append(bases, base)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					beforeBilled, beforeReached := mock.Billed(), reached.Load()
					start := time.Now()
					statuses := runAccountingCase(t, bases, topo+"/"+c.name, c)
					elapsed := time.Since(start)
					got := mock.Billed() - beforeBilled
					refill := int64(0)
					if len(engines) > 1 {
						refill = int64(math.Ceil(5000 * elapsed.Seconds() / 3600))
					}
					t.Logf("%d calls: %v; billed %d output tokens of 5000 (+%d refilled)", accountingCalls, statuses, got, refill)
					if got > 5000+refill {
						t.Errorf("the upstream billed %d output tokens, past the quota 5000 + %d refilled", got, refill)
					}
					if c.refused != 0 && (statuses[c.refused] != accountingCalls || reached.Load() != beforeReached) {
						t.Errorf("got %v, %d reaching the upstream; want every call refused with %d and none reaching it",
							statuses, reached.Load()-beforeReached, c.refused)
					}
					if c.name == "count_tokens" && (statuses[http.StatusOK] != accountingCalls || got != 0) {
						t.Errorf("count_tokens: got %v and %d billed, want every call answered and nothing billed", statuses, got)
					}
				})
			}
		})
	}
}
