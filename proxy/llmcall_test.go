package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// llmGateway is a gateway with one llm route onto the OpenAI mock and one
// token policy per client IP, on the real engine.
type llmGateway struct {
	url     string
	quota   int64
	engine  *limiter.Engine
	policy  *policies.Policy
	settled chan struct{}
}

func newLLMGateway(t *testing.T, mock builtin.OpenAIMockConfig) *llmGateway {
	return newLLMGatewayWithQuota(t, mock, 100_000)
}

func newLLMGatewayWithQuota(t *testing.T, mock builtin.OpenAIMockConfig, quota int64) *llmGateway {
	t.Helper()
	return llmGatewayOn(t, builtin.OpenAIMock(mock), quota)
}

// llmGatewayOn is newLLMGatewayWithQuota onto the upstream h.
func llmGatewayOn(t *testing.T, h http.Handler, quota int64) *llmGateway {
	t.Helper()
	up := newUpstream(t, h)
	pol := testPolicy(t, "tokens", "ip", limiter.Limit{Rate: quota, Period: time.Hour}, policies.MissingShared)
	pol.Cost = policies.CostTokens
	rt := testRoute(t, "llm", "/v1/", up.URL, pol)
	rt.Provider, rt.DefaultMaxTokens, rt.MaxBodyBytes = llm.OpenAIProvider, 200, 1<<20
	e := newEngine(t, newTestClock())
	srv, gw := newGateway(t, testSnapshot(t, nil, rt), e, gatewayOpts{})
	g := &llmGateway{url: srv.URL, quota: quota, engine: e, policy: pol, settled: make(chan struct{}, 100)}
	gw.settled = func() { g.settled <- struct{}{} }
	return g
}

// used is what the client's bucket holds, read without taking anything.
func (g *llmGateway) used(t *testing.T) int64 {
	t.Helper()
	v, res, err := g.engine.Reserve(context.Background(), []limiter.Check{{Rule: g.policy.Rule, Limit: g.policy.Limit, Key: "127.0.0.1/32", Cost: 1}})
	if err != nil || !v.Allowed {
		t.Fatalf("probe: allowed=%v err=%v", v.Allowed, err)
	}
	res.Settle(context.Background(), []int64{0})
	return g.quota - v.Decisions[0].Remaining - 1
}

func (g *llmGateway) waitSettled(t *testing.T) {
	t.Helper()
	select {
	case <-g.settled:
	case <-time.After(10 * time.Second):
		t.Fatal("the call was not settled within 10s")
	}
}

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say something about rate limits."}],"max_tokens":100%s}`

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A non-streamed call is settled to the usage the provider reported.
func TestLLMCallSettlesToItsUsage(t *testing.T) {
	g := newLLMGateway(t, builtin.OpenAIMockConfig{CompletionTokens: 20})
	resp := post(t, g.url, strings.Replace(chatBody, "%s", "", 1))
	var got struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	err := json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || got.Usage.TotalTokens == 0 {
		t.Fatalf("got status %d, usage %+v, err %v; want 200 with usage", resp.StatusCode, got.Usage, err)
	}
	g.waitSettled(t)
	req, _ := llm.ParseRequest(llm.ChatCompletions, []byte(strings.Replace(chatBody, "%s", "", 1)))
	if used := g.used(t); used != got.Usage.TotalTokens {
		t.Fatalf("the bucket holds %d tokens, want the usage %d (reserved %d)", used, got.Usage.TotalTokens, req.PromptTokens+100)
	}
}

// A stream is settled to the usage chunk the gateway asked for; the client,
// which did not ask for it, never sees it. A client that asked sees it.
func TestLLMStreamSettlesToItsUsage(t *testing.T) {
	g := newLLMGateway(t, builtin.OpenAIMockConfig{CompletionTokens: 20})
	read := func(extra string) (events []string) {
		resp := post(t, g.url, strings.Replace(chatBody, "%s", extra, 1))
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events = append(events, data)
			}
		}
		g.waitSettled(t)
		return events
	}
	asked := read(`,"stream":true,"stream_options":{"include_usage":true}`)
	var usage int64
	for _, e := range asked {
		var chunk struct {
			Usage *struct {
				TotalTokens int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(e), &chunk) == nil && chunk.Usage != nil {
			usage = chunk.Usage.TotalTokens
		}
	}
	if usage == 0 || g.used(t) != usage {
		t.Fatalf("asked for usage: got usage %d and %d tokens held, want them equal and > 0", usage, g.used(t))
	}
	plain := read(`,"stream":true`)
	for _, e := range plain {
		if strings.Contains(e, `"usage":{`) {
			t.Fatalf("a client that did not ask for usage got it: %s", e)
		}
	}
	if len(plain) == 0 || plain[len(plain)-1] != "[DONE]" {
		t.Fatalf("got events %q, want a stream ending in [DONE]", plain)
	}
	if got := g.used(t); got != 2*usage {
		t.Fatalf("after the second stream the bucket holds %d tokens, want %d (the hidden usage counted)", got, 2*usage)
	}
}

// A client that hangs up mid-stream is charged its reservation: the
// provider may have billed the whole output cap (a reasoning model bills
// its thinking before the first visible token). A policy with
// charge_without_usage: delivered charges the prompt and the text that
// passed instead: less than the reservation, more than nothing.
func TestLLMStreamCutIsChargedItsReservation(t *testing.T) {
	for _, delivered := range []bool{false, true} {
		t.Run(fmt.Sprintf("delivered=%v", delivered), func(t *testing.T) {
			var events atomic.Int64
			hold := make(chan struct{})
			g := newLLMGateway(t, builtin.OpenAIMockConfig{
				CompletionTokens: 50,
				TokensPerSecond:  1000,
				Sleep: func(ctx context.Context, _ time.Duration) error {
					if events.Add(1) <= 5 {
						return nil
					}
					select { // hold the stream until the client is gone
					case <-ctx.Done():
						return ctx.Err()
					case <-hold:
						return nil
					}
				},
			})
			g.policy.ChargeDelivered = delivered
			defer close(hold)
			body := strings.Replace(chatBody, "%s", `,"stream":true`, 1)
			resp := post(t, g.url, body)
			sc := bufio.NewScanner(resp.Body)
			for n := 0; n < 3 && sc.Scan(); {
				if strings.HasPrefix(sc.Text(), "data: ") {
					n++
				}
			}
			resp.Body.Close() // the client hangs up mid-stream
			g.waitSettled(t)
			req, _ := llm.ParseRequest(llm.ChatCompletions, []byte(body))
			used, reserved := g.used(t), req.PromptTokens+100
			switch {
			case !delivered && used != reserved:
				t.Fatalf("a stream cut after a few chunks: %d tokens held, want the reservation %d", used, reserved)
			case delivered && (used <= req.PromptTokens || used >= reserved):
				t.Fatalf("a stream cut after a few chunks: %d tokens held, want more than the prompt (%d) and less than the reservation (%d)",
					used, req.PromptTokens, reserved)
			}
		})
	}
}

// An upstream error before any output gives the tokens back; a body the
// gateway cannot read as a request is refused before anything is reserved.
func TestLLMUpstreamErrorGivesTokensBack(t *testing.T) {
	g := newLLMGateway(t, builtin.OpenAIMockConfig{})
	resp := post(t, g.url, `{"messages":[{"role":"user","content":"no model"}],"max_tokens":100}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d from the mock, want its 400", resp.StatusCode)
	}
	g.waitSettled(t)
	if used := g.used(t); used != 0 {
		t.Fatalf("after an upstream error the bucket holds %d tokens, want 0", used)
	}
	resp = post(t, g.url, `{"model": 5}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || g.used(t) != 0 {
		t.Fatalf("a malformed request: got %d and %d tokens held, want 400 and 0", resp.StatusCode, g.used(t))
	}
}

// Fifty concurrent streams against a token quota that holds about twenty
// reservations: the quota is never exceeded, since a request is admitted
// only for what it may cost, and what the bucket holds afterwards is exactly
// the sum of the usages of the streams that were admitted.
func TestLLMConcurrentStreamsStayInsideTheQuota(t *testing.T) {
	const quota = 2500
	g := newLLMGatewayWithQuota(t, builtin.OpenAIMockConfig{CompletionTokens: 30}, quota)
	body := strings.Replace(chatBody, "%s", `,"stream":true,"stream_options":{"include_usage":true}`, 1)
	req, _ := llm.ParseRequest(llm.ChatCompletions, []byte(body))
	var sum, admitted atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(g.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("got %d, want 200 or 429", resp.StatusCode)
				}
				return
			}
			admitted.Add(1)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var chunk struct {
					Usage *struct {
						TotalTokens int64 `json:"total_tokens"`
					} `json:"usage"`
				}
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &chunk) == nil && chunk.Usage != nil {
					sum.Add(chunk.Usage.TotalTokens)
				}
			}
		}()
	}
	wg.Wait()
	for range admitted.Load() {
		g.waitSettled(t)
	}
	used := g.used(t)
	t.Logf("50 concurrent streams reserving %d tokens each from a %d quota: %d admitted, %d tokens used by their usages, %d held",
		req.PromptTokens+100, quota, admitted.Load(), sum.Load(), used)
	if used != sum.Load() || used > quota {
		t.Fatalf("the bucket holds %d, want exactly the usages' sum %d, within the quota %d", used, sum.Load(), quota)
	}
	if admitted.Load() < quota/(req.PromptTokens+100) {
		t.Fatalf("admitted %d, want at least the %d reservations the quota holds at once", admitted.Load(), quota/(req.PromptTokens+100))
	}
}

// An llm route reads the key where OpenAI's SDK sends it, answers errors in
// OpenAI's shape, and sends OpenAI's rate-limit headers, so the official
// SDKs raise their RateLimitError and back off by themselves.
func TestLLMRouteSpeaksOpenAI(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 10}))
	snap := compileYAML(t, `
tenants:
  keys:
    sk-free: {tenant: acme, plan: free}
    sk-poor: {tenant: initech, plan: free}
routes:
  - name: budget
    match: {path_prefix: /budget/}
    upstream: `+up.URL+`
    strip_prefix: /budget
    llm: openai
    policies: [daily-tokens]
  - name: llm
    match: {path_prefix: /v1/}
    upstream: `+up.URL+`
    llm: openai
    default_max_tokens: 50
    policies: [llm-rpm, llm-tpm]
policies:
  llm-rpm: {key: tenant, rate: 2, per: 1m, on_missing_key: reject}
  llm-tpm: {key: tenant, cost: tokens, rate: 100000, per: 1m, on_missing_key: reject}
  daily-tokens: {key: tenant, cost: tokens, rate: 20, per: 24h, on_missing_key: reject}
`)
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	call := func(path, key string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(strings.Replace(chatBody, "%s", "", 1)))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp, body
	}
	errorOf := func(body map[string]any) (typ, code string) {
		e, _ := body["error"].(map[string]any)
		typ, _ = e["type"].(string)
		code, _ = e["code"].(string)
		return typ, code
	}

	resp, _ := call("/v1/chat/completions", "sk-free")
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "1" ||
		h.Get("x-ratelimit-limit-tokens") != "100000" || h.Get("x-ratelimit-reset-requests") == "" || h.Get("x-ratelimit-reset-tokens") == "" {
		t.Fatalf("first call with Authorization: Bearer: got %d, headers %v; want 200 with OpenAI's rate-limit headers", resp.StatusCode, h)
	}
	if rem := h.Get("x-ratelimit-remaining-tokens"); rem == "" || rem == "100000" {
		t.Fatalf("x-ratelimit-remaining-tokens: got %q, want the quota less the reservation", rem)
	}

	resp, body := call("/v1/chat/completions", "")
	if typ, code := errorOf(body); resp.StatusCode != 401 || typ != "invalid_request_error" || code != "invalid_api_key" || resp.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Fatalf("no key: got %d %v (%s/%s), want 401 invalid_api_key with WWW-Authenticate: Bearer", resp.StatusCode, body, typ, code)
	}

	call("/v1/chat/completions", "sk-free")
	resp, body = call("/v1/chat/completions", "sk-free")
	if typ, code := errorOf(body); resp.StatusCode != 429 || typ != "rate_limit_exceeded" || code != "rate_limit_exceeded" ||
		resp.Header.Get("retry-after-ms") == "" || resp.Header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("third call in a minute: got %d %v, headers %v; want 429 rate_limit_exceeded with retry-after-ms", resp.StatusCode, body, resp.Header)
	}

	resp, body = call("/budget/v1/chat/completions", "sk-poor")
	if typ, code := errorOf(body); resp.StatusCode != 429 || typ != "insufficient_quota" || code != "insufficient_quota" {
		t.Fatalf("over a daily token budget: got %d %v, want 429 insufficient_quota", resp.StatusCode, body)
	}
}

// A policy keyed on tenant+model gives each model its own quota.
func TestLLMKeyOnModel(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{}))
	snap := compileYAML(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: `+up.URL+`
    llm: openai
    policies: [per-model]
policies:
  per-model: {key: tenant+model, rate: 1, per: 1h, on_missing_key: reject}
`)
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	status := func(model string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`))
		req.Header.Set("Authorization", "Bearer sk-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, step := range []struct {
		model string
		want  int
	}{{"gpt-4o", 200}, {"gpt-4o", 429}, {"gpt-4o-mini", 200}, {"gpt-4o-mini", 429}} {
		if got := status(step.model); got != step.want {
			t.Fatalf("%s: got %d, want %d (one call an hour per tenant and model)", step.model, got, step.want)
		}
	}
}

// With upstream_api_key the upstream sees the gateway's key, never the
// tenant's.
func TestLLMUpstreamAPIKeyReplacesTheTenants(t *testing.T) {
	got := make(chan http.Header, 1)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	snap := compileYAML(t, `
tenants:
  keys:
    sk-tenant: {tenant: acme, plan: free}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: `+up.URL+`
    llm: openai
    upstream_api_key: sk-gateway-own
    policies: [tpm]
policies:
  tpm: {key: tenant, cost: tokens, rate: 1000, per: 1m, on_missing_key: reject}
`)
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(strings.Replace(chatBody, "%s", "", 1)))
	req.Header.Set("Authorization", "Bearer sk-tenant")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h := <-got
	if resp.StatusCode != 200 || h.Get("Authorization") != "Bearer sk-gateway-own" || strings.Contains(fmt.Sprint(h), "sk-tenant") {
		t.Fatalf("got %d and upstream headers %v, want 200 and only the gateway's key upstream", resp.StatusCode, h)
	}
}

// GET /v1/quota tells a tenant what it has left, per policy, and takes
// nothing; an unknown key gets 401.
func TestQuotaReport(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 20}))
	snap := compileYAML(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: pro}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: `+up.URL+`
    llm: openai
    policies: [rpm, tpm, per-ip]
policies:
  rpm: {key: tenant, rate: 5, per: 1m, plans: {pro: 50}, on_missing_key: reject}
  tpm: {key: tenant, cost: tokens, rate: 1000, per: 1m, on_missing_key: reject}
  per-ip: {key: ip, rate: 100, per: 1m}
`)
	srv, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	settled := make(chan struct{}, 1)
	h.settled = func() { settled <- struct{}{} }
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(strings.Replace(chatBody, "%s", "", 1)))
	req.Header.Set("Authorization", "Bearer sk-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var call struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&call)
	resp.Body.Close()
	<-settled

	for range 3 { // asking takes nothing
		status, rep := quotaOf(t, srv.URL, "sk-1")
		if status != 200 || rep.Tenant != "acme" || rep.Plan != "pro" || len(rep.Policies) != 2 {
			t.Fatalf("got %d %+v, want 200 for acme (pro) with its two tenant policies", status, rep)
		}
		rpm, tpm := rep.Policies[0], rep.Policies[1]
		if rpm.Policy != "rpm" || rpm.Limit != 50 || rpm.Remaining != 49 || rpm.Per != "1m" {
			t.Fatalf("rpm: got %+v, want the pro plan's 50 a minute with 49 left", rpm)
		}
		if tpm.Policy != "tpm" || tpm.Cost != "tokens" || tpm.Remaining != 1000-call.Usage.TotalTokens || tpm.ResetAfterMs <= 0 {
			t.Fatalf("tpm: got %+v, want 1000 less the call's %d tokens, with a reset time", tpm, call.Usage.TotalTokens)
		}
	}
	if status, _ := quotaOf(t, srv.URL, "sk-unknown"); status != http.StatusUnauthorized {
		t.Fatalf("an unknown key: got %d, want 401", status)
	}
}

// A dollar budget charges each call its price from the table: cached input
// at the cached price, a model the table does not name at the default
// price (never free), and a spent daily budget answers insufficient_quota.
func TestLLMDollarBudget(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 100, PromptCache: true}))
	snap := compileYAML(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
prices:
  gpt-4o-mini: {input: 0.15, cached_input: 0.075, output: 0.6}
  default: {input: 10, output: 30}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: `+up.URL+`
    llm: openai
    policies: [budget]
policies:
  budget: {key: tenant, cost: usd, rate: 1, per: 24h, on_missing_key: reject}
`)
	srv, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	settled := make(chan struct{}, 10)
	h.settled = func() { settled <- struct{}{} }
	type usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	call := func(model, content string) (int, usage, string) {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"` + content + `"}],"max_tokens":100}`
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			Usage usage `json:"usage"`
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&got)
		if resp.StatusCode == 200 {
			<-settled
		}
		return resp.StatusCode, got.Usage, got.Error.Code
	}
	left := func() int64 {
		_, rep := quotaOf(t, srv.URL, "sk-1")
		return rep.Policies[0].Remaining
	}
	price := func(u usage, in, cachedIn, out float64) int64 {
		f := float64(u.PromptTokens-u.PromptTokensDetails.CachedTokens)*in + float64(u.PromptTokensDetails.CachedTokens)*cachedIn + float64(u.CompletionTokens)*out
		return int64(math.Ceil(f - 1e-9))
	}

	long := strings.Repeat("word ", 1200) // over 1024 tokens: the mock reports part of it cached
	status, u, _ := call("gpt-4o-mini", long)
	if status != 200 || u.PromptTokensDetails.CachedTokens == 0 {
		t.Fatalf("got %d, usage %+v, want 200 with cached tokens", status, u)
	}
	spent := price(u, 0.15, 0.075, 0.6)
	if got := 1_000_000 - left(); got != spent {
		t.Fatalf("charged %d micro-dollars, want %d (cached input at the cached price)", got, spent)
	}

	status, u, _ = call("mystery-model", "hello")
	if status != 200 {
		t.Fatalf("an unpriced model: got %d, want 200 (priced at the default)", status)
	}
	spent += price(u, 10, 10, 30)
	if got := 1_000_000 - left(); got != spent {
		t.Fatalf("charged %d micro-dollars in all, want %d (the unpriced model at the default price)", got, spent)
	}

	for range 500 { // about 3,100 micro-dollars a call: the dollar is spent in about 320
		status, _, code := call("mystery-model", "hello")
		if status == 429 {
			if code != "insufficient_quota" {
				t.Fatalf("a spent daily budget: got code %q, want insufficient_quota", code)
			}
			return
		}
	}
	t.Fatal("the $1 daily budget never ran out")
}

// A price change by reload applies from the next call: prices are read from
// the snapshot each call uses.
func TestLLMPriceChangeByReload(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 10}))
	config := func(output float64) *policies.Snapshot {
		return compileYAML(t, fmt.Sprintf(`
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
prices:
  default: {input: 1, output: %g}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: %s
    llm: openai
    policies: [budget]
policies:
  budget: {key: tenant, cost: usd, rate: 1, per: 24h, on_missing_key: reject}
`, output, up.URL))
	}
	srv, h := newGateway(t, config(10), newEngine(t, newTestClock()), gatewayOpts{})
	settled := make(chan struct{}, 1)
	h.settled = func() { settled <- struct{}{} }
	spend := func() int64 {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`))
		req.Header.Set("Authorization", "Bearer sk-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		<-settled
		_, rep := quotaOf(t, srv.URL, "sk-1")
		return 1_000_000 - rep.Policies[0].Remaining
	}
	first := spend() // 10 output tokens at $10 a million: 100 micro-dollars, plus the prompt
	h.snapshots.(*snapshotHolder).p.Store(config(1000))
	second := spend() - first // the same call, output now at $1000 a million
	if second-first < 10*(1000-10)-1 {
		t.Fatalf("the same call cost %d then %d micro-dollars, want the second dearer by the output's new price (≈ %d)", first, second, 10*(1000-10))
	}
}

// error_format: gateway keeps the gateway's own error shape on an llm route.
func TestLLMRouteGatewayErrorFormat(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{}))
	snap := compileYAML(t, `
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: `+up.URL+`
    llm: openai
    error_format: gateway
    policies: [tpm]
policies:
  tpm: {key: tenant, cost: tokens, rate: 1000, per: 1m, on_missing_key: reject}
`)
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	resp := post(t, srv.URL, strings.Replace(chatBody, "%s", "", 1))
	defer resp.Body.Close()
	var body struct {
		Code  int             `json:"code"`
		Error json.RawMessage `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 401 || body.Code != 40100 || body.Error != nil {
		t.Fatalf("got %d with code %d and error %s, want the gateway's 401 shape (code 40100)", resp.StatusCode, body.Code, body.Error)
	}
}

// quotaOf asks the gateway at url for key's quota report.
func quotaOf(t *testing.T, url, key string) (int, quotaReport) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/quota", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep quotaReport
	json.NewDecoder(resp.Body).Decode(&rep)
	return resp.StatusCode, rep
}

// A call whose connection to the upstream was never made reached no
// provider: it is charged nothing. A call sent that got no answer (the
// route's timeout) may be billed whole: it is charged its reservation.
func TestLLMChargeWhenNoAnswer(t *testing.T) {
	for _, tt := range []struct {
		name       string
		upstream   func(t *testing.T) string
		wantStatus int
		charged    func(reserved int64) int64
	}{
		{"never connected", closedURL, http.StatusBadGateway, func(int64) int64 { return 0 }},
		{"sent, no answer", func(t *testing.T) string {
			srv, _ := blockingUpstream(t)
			return srv.URL
		}, http.StatusGatewayTimeout, func(r int64) int64 { return r }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pol := testPolicy(t, "tokens", "ip", limiter.Limit{Rate: 100_000, Period: time.Hour}, policies.MissingShared)
			pol.Cost = policies.CostTokens
			rt := testRoute(t, "llm", "/v1/", tt.upstream(t), pol)
			rt.Provider, rt.MaxBodyBytes, rt.Timeout = llm.OpenAIProvider, 1<<20, 300*time.Millisecond
			e := newEngine(t, newTestClock())
			srv, h := newGateway(t, testSnapshot(t, nil, rt), e, gatewayOpts{})
			g := &llmGateway{url: srv.URL, quota: 100_000, engine: e, policy: pol, settled: make(chan struct{}, 4)}
			h.settled = func() { g.settled <- struct{}{} }
			body := strings.Replace(chatBody, "%s", "", 1)
			resp := post(t, g.url, body)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("got %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			g.waitSettled(t)
			req, _ := llm.ParseRequest(llm.ChatCompletions, []byte(body))
			if used, want := g.used(t), tt.charged(req.PromptTokens+100); used != want {
				t.Fatalf("charged %d tokens, want %d", used, want)
			}
		})
	}
}

// A call without an output cap is given the one it reserves, in the field
// its model takes, and nothing else in its body changes; on a route that
// counts no tokens it is forwarded as it came.
func TestLLMUncappedCallIsGivenItsCap(t *testing.T) {
	seen := make(chan []byte, 1)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- b
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	for _, tt := range []struct {
		name, path, body, want string
		cost                   policies.Cost
	}{
		{"chat", "/v1/chat/completions", `{"model":"gpt-4o-mini", "messages":[]}`, `{"model":"gpt-4o-mini", "messages":[],"max_tokens":4096}`, policies.CostTokens},
		{"chat on a reasoning model", "/v1/chat/completions", `{"model":"o3-mini","messages":[],"n":2}`, `{"model":"o3-mini","messages":[],"n":2,"max_completion_tokens":25000}`, policies.CostOutputTokens},
		{"responses", "/v1/responses", `{"model":"gpt-5","input":"hi"}`, `{"model":"gpt-5","input":"hi","max_output_tokens":25000}`, policies.CostUSD},
		{"capped", "/v1/chat/completions", `{"model":"o3","messages":[],"max_tokens":5}`, `{"model":"o3","messages":[],"max_tokens":5}`, policies.CostTokens},
		{"a route counting requests", "/v1/chat/completions", `{"model":"o3","messages":[]}`, `{"model":"o3","messages":[]}`, policies.CostRequests},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pol := testPolicy(t, "p", "ip", limiter.Limit{Rate: 1 << 40, Period: time.Hour}, policies.MissingShared)
			pol.Cost = tt.cost
			rt := testRoute(t, "llm", "/v1/", up.URL, pol)
			rt.Provider, rt.MaxBodyBytes = llm.OpenAIProvider, 1<<20
			srv, _ := newGateway(t, testSnapshot(t, nil, rt), newEngine(t, newTestClock()), gatewayOpts{})
			resp, err := http.Post(srv.URL+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got := <-seen
			if resp.StatusCode != 200 || string(got) != tt.want {
				t.Fatalf("got %d, upstream saw %s; want 200 and %s", resp.StatusCode, got, tt.want)
			}
		})
	}
}
