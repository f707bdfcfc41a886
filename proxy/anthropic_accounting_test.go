package proxy

import (
	"encoding/json"
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

// On an Anthropic route every value counts: text hidden where the gateway
// reads no prompt (a field of tomorrow, a member of a message, a tool's
// input holding an object typed "image", which is text, not an image) is
// sent 64 times at once, on one instance and on two sharing a real Redis,
// against a quota of 10,000 tokens, the mock billing it at a token a byte.
// What the mock billed stays within the quota, and every call was charged
// at least what it billed.
func TestAnthropicHiddenFieldsAtSixtyFourCalls(t *testing.T) {
	mock := builtin.NewAnthropicMock(builtin.AnthropicMockConfig{CompletionTokens: 50})
	up := newUpstream(t, mock).URL
	hidden := strings.Repeat("quota bypass ", 300) // 3,900 bytes, billed a token each
	msg := `"messages":[{"role":"user","content":"Tell me about rate limits."}]`
	cases := []struct {
		name string
		body string
	}{
		{"a field of tomorrow", `{"model":"claude-sonnet-4-5","max_tokens":50,"tomorrow":{"notes":["` + hidden + `"]},` + msg + `}`},
		{"a field of tomorrow, streamed", `{"model":"claude-sonnet-4-5","max_tokens":50,"stream":true,"tomorrow":{"notes":["` + hidden + `"]},` + msg + `}`},
		{"a member of a message", `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"Tell me.","notes":"` + hidden + `"}]}`},
		{"an image typed object in a tool's input", `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"Draw."},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"draw","input":{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + hidden + `"}}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done"}]}]}`},
	}
	// What a client saw: the output of a message, or of a stream's last
	// message_delta.
	seen := func(b []byte) int64 {
		var n int64
		for _, line := range strings.Split(string(b), "\n") {
			var v struct {
				Usage *struct {
					OutputTokens int64 `json:"output_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v) == nil && v.Usage != nil && strings.Contains(line, `"output_tokens"`) {
				n = max(n, v.Usage.OutputTokens)
			}
		}
		return n
	}
	runSeenSuite(t, up, up, len(cases), func(t *testing.T, bases []string, settled []<-chan struct{}, key func(int) string) {
		for ci, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				before := mock.Bill()
				start := time.Now()
				statuses, saw := runKeyedCalls(t, bases, "/v1/messages", key(ci), func(int) string { return c.body }, nil, seen)
				waitSettled(t, settled, statuses[http.StatusOK])
				after := mock.Bill()
				checkSeenCase(t, bases[0], key(ci), len(bases), start, statuses, after.Total()-before.Total(), saw)
			})
		}
	})
}
