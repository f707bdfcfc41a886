package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// anthropicGateway is an llm: anthropic route onto the Anthropic mock, with
// a token policy per client IP, on the real engine; seen holds the headers
// the upstream got.
type anthropicGateway struct {
	*llmGateway
	mock *builtin.AnthropicMock
	seen chan http.Header
}

func newAnthropicGateway(t *testing.T, mock builtin.AnthropicMockConfig, quota, window int64) *anthropicGateway {
	t.Helper()
	m := builtin.NewAnthropicMock(mock)
	seen := make(chan http.Header, 16)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		m.ServeHTTP(w, r)
	}))
	pol := testPolicy(t, "tokens", "ip", limiter.Limit{Rate: quota, Period: time.Hour}, policies.MissingShared)
	pol.Cost = policies.CostTokens
	rt := testRoute(t, "claude", "/v1/", up.URL, pol)
	rt.Provider, rt.ErrorShape = llm.AnthropicProvider, llm.AnthropicProvider
	rt.DefaultMaxTokens, rt.MaxBodyBytes, rt.UpstreamAPIKey = 200, 1<<20, "sk-ant-gateway"
	rt.StreamWindow = window
	e := newEngine(t, newTestClock())
	srv, h := newGateway(t, testSnapshot(t, nil, rt), e, gatewayOpts{})
	g := &llmGateway{url: srv.URL, quota: quota, engine: e, policy: pol, settled: make(chan struct{}, 100)}
	h.settled = func() { g.settled <- struct{}{} }
	return &anthropicGateway{llmGateway: g, mock: m, seen: seen}
}

const claudeBody = `{"model":"claude-sonnet-4-5","max_tokens":%d,"system":"Be brief.","messages":[{"role":"user","content":"Say something about rate limits."}]%s}`

func claudeCall(t *testing.T, g *anthropicGateway, maxTokens int, extra string) *http.Response {
	t.Helper()
	body := strings.Replace(strings.Replace(claudeBody, "%d", strconv.Itoa(maxTokens), 1), "%s", extra, 1)
	req, _ := http.NewRequest("POST", g.url+"/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", "sk-tenant")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A call and a stream reach the upstream with the route's own key in
// x-api-key (the tenant's never) and an anthropic-version, reserve at least
// what the upstream bills for the prompt (a bound from the bytes), and are
// settled to the usage as Anthropic reports it: input_tokens plus both
// cache counts, and message_delta's cumulative output_tokens.
func TestAnthropicCallsSettleToTheirUsage(t *testing.T) {
	g := newAnthropicGateway(t, builtin.AnthropicMockConfig{CompletionTokens: 30, CacheReadTokens: 5, CacheCreationTokens: 3}, 100_000, 0)
	body := strings.Replace(strings.Replace(claudeBody, "%d", "100", 1), "%s", "", 1)
	bound, err := llm.ParseAnthropicPrompt([]byte(body), llm.DefaultModels().For("claude-sonnet-4-5"))
	if err != nil {
		t.Fatal(err)
	}

	resp := claudeCall(t, g, 100, "")
	var msg struct {
		Type  string `json:"type"`
		Usage struct {
			Input         int64 `json:"input_tokens"`
			CacheRead     int64 `json:"cache_read_input_tokens"`
			CacheCreation int64 `json:"cache_creation_input_tokens"`
			Output        int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&msg)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || msg.Type != "message" {
		t.Fatalf("got %d %+v %v, want a message", resp.StatusCode, msg, err)
	}
	h := <-g.seen
	if h.Get("X-Api-Key") != "sk-ant-gateway" || h.Get("Authorization") != "" || h.Get("Anthropic-Version") == "" {
		t.Fatalf("upstream got x-api-key %q, authorization %q, anthropic-version %q: want the route's key and a version",
			h.Get("X-Api-Key"), h.Get("Authorization"), h.Get("Anthropic-Version"))
	}
	if resp.Header.Get("anthropic-ratelimit-tokens-limit") != "100000" || resp.Header.Get("anthropic-ratelimit-tokens-remaining") == "" {
		t.Fatalf("headers %v: want anthropic-ratelimit-tokens-*", resp.Header)
	}
	if _, err := time.Parse(time.RFC3339, resp.Header.Get("anthropic-ratelimit-tokens-reset")); err != nil {
		t.Fatalf("anthropic-ratelimit-tokens-reset %q: want RFC 3339", resp.Header.Get("anthropic-ratelimit-tokens-reset"))
	}
	g.waitSettled(t)
	input := msg.Usage.Input + msg.Usage.CacheRead + msg.Usage.CacheCreation
	if input > bound.Bound {
		t.Fatalf("upstream billed %d input tokens, more than the %d reserved", input, bound.Bound)
	}
	want := input + msg.Usage.Output
	if msg.Usage.CacheRead != 5 || msg.Usage.CacheCreation != 3 || g.used(t) != want {
		t.Fatalf("bucket holds %d, want input %d + cache %d + %d + output %d = %d", g.used(t), msg.Usage.Input, msg.Usage.CacheRead, msg.Usage.CacheCreation, msg.Usage.Output, want)
	}

	resp = claudeCall(t, g, 100, `,"stream":true`)
	var events []string
	var streamed int64 // input and cache counts of message_start, the last output_tokens
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage map[string]int64 `json:"usage"`
			} `json:"message"`
			Usage map[string]int64 `json:"usage"`
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &ev) == nil {
			switch u := ev.Message.Usage; ev.Type {
			case "message_start":
				streamed = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
			case "message_delta":
				streamed += ev.Usage["output_tokens"]
			}
		}
	}
	resp.Body.Close()
	<-g.seen
	g.waitSettled(t)
	if got := strings.Join(events, ","); !strings.HasPrefix(got, "message_start,content_block_start,ping,content_block_delta") ||
		!strings.HasSuffix(got, "content_block_stop,message_delta,message_stop") {
		t.Fatalf("stream events %s: want Anthropic's sequence", got)
	}
	if got := g.used(t); got != want+streamed || streamed <= 30 {
		t.Fatalf("after the stream the bucket holds %d, want the call's %d + the stream's %d", got, want, streamed)
	}
}

// Out of tokens, a call gets Anthropic's rate_limit_error with retry-after
// and the anthropic-ratelimit-* headers.
func TestAnthropicRefusalsInAnthropicShape(t *testing.T) {
	g := newAnthropicGateway(t, builtin.AnthropicMockConfig{CompletionTokens: 10}, 600, 0)
	var last *http.Response
	for range 10 {
		resp := claudeCall(t, g, 400, "")
		if resp.StatusCode == http.StatusTooManyRequests {
			last = resp
			break
		}
		resp.Body.Close()
		<-g.seen
		g.waitSettled(t)
	}
	if last == nil {
		t.Fatal("never refused: want a 429 once the 600 tokens are reserved")
	}
	defer last.Body.Close()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(last.Body).Decode(&e); err != nil || e.Type != "error" || e.Error.Type != "rate_limit_error" || e.Error.Message == "" {
		t.Fatalf("429 body %+v (%v): want {type: error, error: {type: rate_limit_error}}", e, err)
	}
	if ra, err := strconv.Atoi(last.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("retry-after %q, want whole seconds", last.Header.Get("Retry-After"))
	}
	// What truly remains (less than the call needs), not 0.
	if want := strconv.FormatInt(600-g.used(t), 10); last.Header.Get("anthropic-ratelimit-tokens-remaining") != want || last.Header.Get("anthropic-ratelimit-tokens-limit") != "600" {
		t.Fatalf("headers %v: want anthropic-ratelimit-tokens-limit 600, remaining %s", last.Header, want)
	}
}

// Under enforce: stream a Claude stream past the tenant's tokens ends with
// content_block_stop, stop_reason "max_tokens" and message_stop; the
// upstream stops generating; the tenant is charged the prompt's bound and
// the cap it asked for, which the provider may have finished.
func TestAnthropicEnforcedStreamEnds(t *testing.T) {
	const quota, window = 600, 16
	g := newAnthropicGateway(t, builtin.AnthropicMockConfig{CompletionTokens: 500, TokensPerSecond: 2000}, quota, window)
	resp := claudeCall(t, g, 1000, `,"stream":true`)
	var events []string
	var stop string
	var words int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
		var d struct {
			Delta struct {
				Text       string `json:"text"`
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &d) == nil {
			words += int64(len(strings.Fields(d.Delta.Text)))
			if d.Delta.StopReason != "" {
				stop = d.Delta.StopReason
			}
		}
	}
	resp.Body.Close()
	<-g.seen
	g.waitSettled(t)
	if got := strings.Join(events, ","); stop != "max_tokens" || !strings.HasSuffix(got, "content_block_delta,content_block_stop,message_delta,message_stop") {
		t.Fatalf("events %s, stop_reason %q: want the stream ended as at max_tokens", got, stop)
	}
	used := g.owed(t)
	t.Logf("quota %d, window %d: %d words passed, upstream generated %d, charged %d", quota, window, words, g.mock.Billed(), used)
	if billed := g.mock.Billed(); billed >= 500 || billed > words+window {
		t.Fatalf("the upstream generated %d tokens, want it stopped near the %d that passed", billed, words)
	}
	if used < 1000 || used < words {
		t.Fatalf("charged %d, want the cap 1000 and at least the %d that passed", used, words)
	}
}

// On an Anthropic route a refusal that no wait fixes is final as on an
// OpenAI route: x-should-retry: false and no retry hint, in Anthropic's
// shape (the SDK otherwise slept on a retry-after of hours); a per-minute
// limit keeps a hint under a minute.
func TestAnthropicRefusalsSayWhetherWaitingHelps(t *testing.T) {
	up := newUpstream(t, builtin.NewAnthropicMock(builtin.AnthropicMockConfig{CompletionTokens: 10}))
	clock := newTestClock()
	srv, h := newGateway(t, compileYAML(t, `
tenants:
  keys:
    sk-minute: {tenant: minute, plan: minute}
    sk-day: {tenant: day, plan: day}
routes:
  - {name: claude, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: anthropic, policies: [per-minute, daily]}
policies:
  per-minute: {key: tenant, cost: tokens, rate: 1000000, per: 1m, plans: {minute: 600}, on_missing_key: reject}
  daily: {key: tenant, cost: tokens, rate: 1000000, per: 24h, plans: {day: 600}, on_missing_key: reject}
`), newEngine(t, clock), gatewayOpts{})
	settled := make(chan struct{}, 8)
	h.settled = func() { settled <- struct{}{} }
	call := func(key string) *http.Response {
		t.Helper()
		body := strings.Replace(strings.Replace(claudeBody, "%d", "480", 1), "%s", "", 1) // a second call of 480 tokens more no longer fits 600
		req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			waitSettle(t, settled)
		}
		return resp
	}
	for _, key := range []string{"sk-day", "sk-minute"} {
		if resp := call(key); resp.StatusCode != http.StatusOK {
			t.Fatalf("first call of %s: %d", key, resp.StatusCode)
		}
	}
	day := call("sk-day")
	if day.StatusCode != 429 || day.Header.Get("X-Should-Retry") != "false" || day.Header.Get("Retry-After") != "" || day.Header.Get("Retry-After-Ms") != "" {
		t.Errorf("a spent day: got %d, x-should-retry %q, retry-after %q; want 429, false, no hint",
			day.StatusCode, day.Header.Get("X-Should-Retry"), day.Header.Get("Retry-After"))
	}
	minute := call("sk-minute")
	ra, _ := strconv.Atoi(minute.Header.Get("Retry-After"))
	if minute.StatusCode != 429 || minute.Header.Get("X-Should-Retry") == "false" || ra < 1 || ra > 60 {
		t.Errorf("a per-minute limit: got %d, x-should-retry %q, retry-after %d; want 429 with a hint in [1, 60] s",
			minute.StatusCode, minute.Header.Get("X-Should-Retry"), ra)
	}
}
