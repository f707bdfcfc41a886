package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// newEnforcedGateway is newLLMGatewayWithQuota with enforce: stream.
func newEnforcedGateway(t *testing.T, mock builtin.OpenAIMockConfig, quota, window int64) *llmGateway {
	t.Helper()
	up := newUpstream(t, builtin.OpenAIMock(mock))
	pol := testPolicy(t, "tokens", "ip", limiter.Limit{Rate: quota, Period: time.Hour}, policies.MissingShared)
	pol.Cost = policies.CostTokens
	rt := testRoute(t, "llm", "/v1/", up.URL, pol)
	rt.Provider, rt.DefaultMaxTokens, rt.MaxBodyBytes, rt.ErrorShape, rt.StreamWindow = llm.OpenAIProvider, 200, 1<<20, llm.OpenAIProvider, window
	e := newEngine(t, newTestClock())
	srv, h := newGateway(t, testSnapshot(t, nil, rt), e, gatewayOpts{})
	g := &llmGateway{url: srv.URL, quota: quota, engine: e, policy: pol, settled: make(chan struct{}, 100)}
	h.settled = func() { g.settled <- struct{}{} }
	return g
}

// stream posts a chat stream and returns its content deltas, last
// finish_reason and usage total (when it carried one).
func (g *llmGateway) stream(t *testing.T, body string) (deltas int64, finish string, total int64) {
	t.Helper()
	resp := post(t, g.url, body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("got %d, want 200", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ch struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason string                   `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				TotalTokens int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &ch) == nil {
			if ch.Usage != nil {
				total = ch.Usage.TotalTokens
			}
			for _, c := range ch.Choices {
				if c.Delta.Content != "" {
					deltas++
				}
				if c.FinishReason != "" {
					finish = c.FinishReason
				}
			}
		}
	}
	g.waitSettled(t)
	return deltas, finish, total
}

// What an enforced stream is charged: its usage when it ends by itself
// (however many windows it took); its prompt and whole cap when the
// gateway ends it, since the provider may finish the generation it was
// sent (and a reasoning model's thinking never passed).
func TestEnforcedStreamCharges(t *testing.T) {
	const window = 16
	body := func(model string, maxTokens int) string {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Say something about rate limits."}],"max_tokens":%d,"stream":true}`, model, maxTokens)
	}
	prompt := func(b string) int64 {
		req, err := llm.ParseRequest(llm.ChatCompletions, []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		return req.PromptTokens
	}

	t.Run("ends by itself", func(t *testing.T) {
		g := newEnforcedGateway(t, builtin.OpenAIMockConfig{CompletionTokens: 100}, 100_000, window)
		b := strings.Replace(body("gpt-4o-mini", 500), `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
		deltas, finish, total := g.stream(t, b)
		if finish != "stop" || deltas != 100 || total <= 100 {
			t.Fatalf("%d deltas, finish %q, usage %d: want 100, stop and the usage", deltas, finish, total)
		}
		if used := g.used(t); used != total {
			t.Fatalf("charged %d, want the usage %d, whatever windows it took", used, total)
		}
	})
	t.Run("no token policy", func(t *testing.T) {
		up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 100}))
		rt := testRoute(t, "llm", "/v1/", up.URL)
		rt.Provider, rt.DefaultMaxTokens, rt.MaxBodyBytes, rt.StreamWindow = llm.OpenAIProvider, 200, 1<<20, window
		srv, h := newGateway(t, testSnapshot(t, nil, rt), newEngine(t, newTestClock()), gatewayOpts{})
		g := &llmGateway{url: srv.URL, settled: make(chan struct{}, 100)}
		h.settled = func() { g.settled <- struct{}{} }
		if deltas, finish, _ := g.stream(t, body("gpt-4o-mini", 500)); finish != "stop" || deltas != 100 {
			t.Fatalf("%d deltas, finish %q: want the whole stream, nothing to meter it against", deltas, finish)
		}
	})
	t.Run("ended by the gateway", func(t *testing.T) {
		g := newEnforcedGateway(t, builtin.OpenAIMockConfig{CompletionTokens: 500}, 300, window)
		b := body("gpt-4o-mini", 1000)
		deltas, finish, _ := g.stream(t, b)
		if finish != "length" || deltas+prompt(b) > 300 {
			t.Fatalf("%d deltas, finish %q: want cut at length within the quota", deltas, finish)
		}
		if used := g.owed(t); used != prompt(b)+1000 {
			t.Fatalf("charged %d, want prompt %d + the cap 1000", used, prompt(b))
		}
	})
	t.Run("reasoning model ended by the gateway", func(t *testing.T) {
		g := newEnforcedGateway(t, builtin.OpenAIMockConfig{CompletionTokens: 500, ReasoningTokens: 100}, 300, window)
		b := body("o3-mini", 1000)
		_, finish, _ := g.stream(t, b)
		if used := g.owed(t); finish != "length" || used != prompt(b)+1000 {
			t.Fatalf("finish %q, charged %d: want length and prompt %d + the cap 1000", finish, used, prompt(b))
		}
	})
}

// owed is what the client's bucket holds, past its quota too: a bucket in
// debt tells how long until one token passes, a token per Period/Rate.
func (g *llmGateway) owed(t *testing.T) int64 {
	t.Helper()
	d := g.engine.Peek(context.Background(), []limiter.Check{{Rule: g.policy.Rule, Limit: g.policy.Limit, Key: "127.0.0.1/32", Cost: 1}})[0]
	if d.Allowed {
		return g.quota - d.Remaining
	}
	perToken := g.policy.Limit.Period / time.Duration(g.policy.Limit.Rate)
	return g.quota + int64((d.RetryAfter+perToken/2)/perToken) - 1
}

// A Responses API stream the gateway ends closes with response.incomplete
// (status incomplete, reason max_output_tokens), next in sequence_number,
// and nothing after it.
func TestEnforcedResponsesStreamEndsIncomplete(t *testing.T) {
	g := newEnforcedGateway(t, builtin.OpenAIMockConfig{CompletionTokens: 500}, 300, 16)
	resp, err := http.Post(g.url+"/v1/responses", "application/json",
		strings.NewReader(`{"model":"gpt-4o-mini","input":"Say something about rate limits.","max_output_tokens":1000,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var last map[string]any
	var lastSeq, prevSeq float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev map[string]any
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			prevSeq, lastSeq = lastSeq, ev["sequence_number"].(float64)
			last = ev
		}
	}
	g.waitSettled(t)
	r, _ := last["response"].(map[string]any)
	details, _ := r["incomplete_details"].(map[string]any)
	if last["type"] != "response.incomplete" || r["status"] != "incomplete" || details["reason"] != "max_output_tokens" || lastSeq != prevSeq+1 {
		t.Fatalf("last event %v (sequence %v after %v): want response.incomplete, next in sequence", last, lastSeq, prevSeq)
	}
	if used := g.owed(t); used < 1000 {
		t.Fatalf("charged %d, want the prompt and the cap 1000", used)
	}
}
