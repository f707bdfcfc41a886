package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// llmAnswer is one answer of an llm route, its OpenAI error decoded.
type llmAnswer struct {
	status     int
	header     http.Header
	typ, code  string
	message    string
	gatewayErr bool  // the body is the gateway's own shape, not OpenAI's
	usage      int64 // a completion's total_tokens
}

func llmDo(t *testing.T, method, url, key, body string) llmAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
		Code  int `json:"code"`
		Usage struct {
			Total int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&b)
	a := llmAnswer{status: resp.StatusCode, header: resp.Header, gatewayErr: b.Code != 0, usage: b.Usage.Total}
	if b.Error != nil {
		a.typ, a.message = b.Error.Type, b.Error.Message
		if b.Error.Code != nil {
			a.code = *b.Error.Code
		}
	}
	return a
}

// pastCountWithoutSlot is a chat call of about 21 KiB: past
// countWithoutSlot, so it takes a tokenize slot.
var pastCountWithoutSlot = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 3<<10) + `"}],"max_tokens":10}`

func chatCall(maxTokens int) string {
	return fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say something about rate limits."}],"max_tokens":%d}`, maxTokens)
}

// llmTestGateway serves yaml on the real engine over the OpenAI mock, whose
// completions are as long as their cap (so usage is the reservation);
// settled receives one value per settled call.
func llmTestGateway(t *testing.T, yaml string) (url string, h *Handler, clock *clocktest.Clock, settled chan struct{}) {
	t.Helper()
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 1 << 20}))
	clock = newTestClock()
	srv, h := newGateway(t, compileYAML(t, strings.ReplaceAll(yaml, "UPSTREAM", up.URL)), newEngine(t, clock), gatewayOpts{})
	settled = make(chan struct{}, 64)
	h.settled = func() { settled <- struct{}{} }
	return srv.URL, h, clock, settled
}

func waitSettle(t *testing.T, settled <-chan struct{}) {
	t.Helper()
	select {
	case <-settled:
	case <-time.After(10 * time.Second):
		t.Fatal("the call was not settled within 10s")
	}
}

// reservation is what the gateway reserves for body: its prompt plus its cap.
func reservation(t *testing.T, body string) int64 {
	t.Helper()
	req, err := llm.ParseRequest(llm.ChatCompletions, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return req.PromptTokens + req.MaxOutput
}

// A refusal that no wait fixes says so in the terms each SDK reads:
// x-should-retry: false, insufficient_quota, and no retry hint (the
// openai SDK slept on a 13-hour retry-after-ms; LangChain retried a call
// larger than the quota every minute). A per-minute limit stays
// retryable, with a hint the SDKs honour.
func TestLLMRefusalsSayWhetherWaitingHelps(t *testing.T) {
	url, _, _, settled := llmTestGateway(t, `
tenants:
  keys:
    sk-minute: {tenant: minute, plan: minute}
    sk-day: {tenant: day, plan: day}
    sk-hour: {tenant: hour, plan: hour}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: UPSTREAM, llm: openai, policies: [per-minute, daily, hourly]}
policies:
  per-minute: {key: tenant, cost: tokens, rate: 1000000, per: 1m, plans: {minute: 600}, on_missing_key: reject}
  daily: {key: tenant, cost: tokens, rate: 1000000, per: 24h, plans: {day: 600}, on_missing_key: reject}
  hourly: {key: tenant, cost: tokens, rate: 1000000, per: 1h, plans: {hour: 600}, on_missing_key: reject}
`)
	chat := url + "/v1/chat/completions"
	ok := func(key string) {
		t.Helper()
		if a := llmDo(t, "POST", chat, key, chatCall(400)); a.status != 200 {
			t.Fatalf("first call of %s: %d", key, a.status)
		}
		waitSettle(t, settled)
	}
	final := func(t *testing.T, what string, a llmAnswer) {
		t.Helper()
		if a.status != 429 || a.typ != "insufficient_quota" || a.code != "insufficient_quota" {
			t.Fatalf("%s: got %d %s/%s %q, want 429 insufficient_quota", what, a.status, a.typ, a.code, a.message)
		}
		if got := a.header.Get("x-should-retry"); got != "false" {
			t.Errorf("%s: x-should-retry %q, want false", what, got)
		}
		for _, name := range []string{"retry-after-ms", "Retry-After"} {
			if v := a.header.Get(name); v != "" {
				t.Errorf("%s: %s %q, want no retry hint", what, name, v)
			}
		}
	}
	call := chatCall(400) // reserves about 415 of 600

	// Larger than the whole quota: never.
	final(t, "a call larger than the quota", llmDo(t, "POST", chat, "sk-minute", chatCall(5000)))
	// A spent daily budget: not before tomorrow.
	ok("sk-day")
	final(t, "a spent daily budget", llmDo(t, "POST", chat, "sk-day", call))
	// An hourly quota whose wait is past what a client acts on.
	ok("sk-hour")
	final(t, "an hourly quota that frees in minutes", llmDo(t, "POST", chat, "sk-hour", call))

	// A per-minute limit: retryable, with a hint under a minute.
	ok("sk-minute")
	a := llmDo(t, "POST", chat, "sk-minute", call)
	ms, _ := strconv.ParseInt(a.header.Get("retry-after-ms"), 10, 64)
	if a.status != 429 || a.code != "rate_limit_exceeded" || a.header.Get("x-should-retry") == "false" || ms <= 0 || ms > 60_000 {
		t.Fatalf("a per-minute limit: got %d %s, retry-after-ms %d, x-should-retry %q; want 429 rate_limit_exceeded with a hint in (0, 60s]",
			a.status, a.code, ms, a.header.Get("x-should-retry"))
	}
}

// x-ratelimit-*-tokens come from token policies only; a dollar budget has
// its own set, in dollars. On a 429 each set that applies is there with
// the true remaining: a requests policy's 429 carries the tokens set, and
// a call too large for what is left shows what is left, not 0.
func TestLLMHeadersOneUnitPerSet(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 10}))
	snap := compileYAML(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
    sk-2: {tenant: globex, plan: free}
prices:
  default: {input: 0.15, output: 0.6}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: openai, policies: [rpm, tpm, dollars]}
policies:
  rpm: {key: tenant, rate: 2, per: 1m, on_missing_key: reject}
  tpm: {key: tenant, cost: tokens, rate: 2000000, per: 1m, on_missing_key: reject}
  dollars: {key: tenant, cost: usd, rate: 1, per: 1h, on_missing_key: reject}
`)
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	body := chatCall(100)
	a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-1", body)
	h := a.header
	if a.status != 200 || h.Get("x-ratelimit-limit-tokens") != "2000000" || h.Get("x-ratelimit-limit-usd") != "1.000000" {
		t.Fatalf("got %d, limit-tokens %q, limit-usd %q; want 200, the token policy's 2000000 and the budget's $1.000000",
			a.status, h.Get("x-ratelimit-limit-tokens"), h.Get("x-ratelimit-limit-usd"))
	}
	if rem, _ := strconv.ParseInt(h.Get("x-ratelimit-remaining-tokens"), 10, 64); rem != 2_000_000-reservation(t, body) {
		t.Errorf("remaining-tokens %d, want the token bucket's %d", rem, 2_000_000-reservation(t, body))
	}
	if rem := h.Get("x-ratelimit-remaining-usd"); !strings.HasPrefix(rem, "0.99") {
		t.Errorf("remaining-usd %q, want 0.99…", rem)
	}
	llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-1", body)
	// The requests policy refuses: the tokens set is there, and true.
	a = llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-1", body)
	if a.status != 429 || a.header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("third call: %d, remaining-requests %q; want 429 and 0", a.status, a.header.Get("x-ratelimit-remaining-requests"))
	}
	if rem, _ := strconv.ParseInt(a.header.Get("x-ratelimit-remaining-tokens"), 10, 64); rem < 2_000_000-2*reservation(t, body) {
		t.Fatalf("a requests policy's 429: remaining-tokens %q, want the token bucket's true remaining (≥ %d)",
			a.header.Get("x-ratelimit-remaining-tokens"), 2_000_000-2*reservation(t, body))
	}

	// A token policy's 429 for a call larger than what is left shows what is left.
	url, _, _, settled := llmTestGateway(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: UPSTREAM, llm: openai, policies: [tpm]}
policies:
  tpm: {key: tenant, cost: tokens, rate: 1000, per: 1m, on_missing_key: reject}
`)
	first := chatCall(600)
	a = llmDo(t, "POST", url+"/v1/chat/completions", "sk-1", first)
	waitSettle(t, settled)
	left := 1000 - a.usage
	a = llmDo(t, "POST", url+"/v1/chat/completions", "sk-1", first)
	if a.status != 429 || a.header.Get("x-ratelimit-remaining-tokens") != strconv.FormatInt(left, 10) {
		t.Fatalf("too large for what is left: %d, remaining-tokens %q; want 429 and %d", a.status, a.header.Get("x-ratelimit-remaining-tokens"), left)
	}
}

// GET /v1/quota?tokens=N answers for a call of that size, and what it says
// is what the next such call gets: refused with the wait it gave, or
// admitted. Without tokens it says what it assumed.
func TestQuotaAnswersForACallOfAGivenSize(t *testing.T) {
	url, _, clock, settled := llmTestGateway(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: UPSTREAM, llm: openai, policies: [tpm, tpd]}
policies:
  tpm: {key: tenant, cost: tokens, rate: 1000, per: 1m, on_missing_key: reject}
  tpd: {key: tenant, cost: tokens, rate: 100000, per: 24h, on_missing_key: reject}
`)
	type report struct {
		Call struct {
			Tokens  int64  `json:"tokens"`
			Assumed string `json:"assumed"`
		} `json:"call"`
		Allowed      bool  `json:"allowed"`
		RetryAfterMs int64 `json:"retry_after_ms"`
		Final        bool  `json:"final"`
		Policies     []struct {
			Policy    string `json:"policy"`
			Remaining int64  `json:"remaining"`
		} `json:"policies"`
	}
	quota := func(query string) report {
		t.Helper()
		req, _ := http.NewRequest("GET", url+"/v1/quota"+query, nil)
		req.Header.Set("Authorization", "Bearer sk-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rep report
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != 200 {
			t.Fatalf("quota%s: %d %v", query, resp.StatusCode, err)
		}
		return rep
	}
	body := chatCall(600)
	n := reservation(t, body)
	ask := "?tokens=" + strconv.FormatInt(n, 10)
	if rep := quota(""); rep.Call.Tokens != 1 || !strings.Contains(rep.Call.Assumed, "tokens=1") || !rep.Allowed {
		t.Fatalf("without tokens: %+v, want an answer for 1 token that says so", rep)
	}
	if rep := quota(ask); !rep.Allowed || rep.RetryAfterMs != 0 {
		t.Fatalf("fresh quota: %+v, want allowed", rep)
	}
	if a := llmDo(t, "POST", url+"/v1/chat/completions", "sk-1", body); a.status != 200 {
		t.Fatalf("first call: %d", a.status)
	}
	waitSettle(t, settled)
	// 1000 - n remain (fewer once settled): one token would pass, this call would not.
	if rep := quota(""); !rep.Allowed {
		t.Fatalf("one token: %+v, want allowed", rep)
	}
	rep := quota(ask)
	if rep.Allowed || rep.RetryAfterMs <= 0 || rep.Final {
		t.Fatalf("a call of %d tokens after the first: %+v, want refused, retryable, with a wait", n, rep)
	}
	a := llmDo(t, "POST", url+"/v1/chat/completions", "sk-1", body)
	ms, _ := strconv.ParseInt(a.header.Get("retry-after-ms"), 10, 64)
	if a.status != 429 || ms != rep.RetryAfterMs {
		t.Fatalf("the call after the report: %d, retry-after-ms %d; the report said %d", a.status, ms, rep.RetryAfterMs)
	}
	clock.Advance(time.Duration(rep.RetryAfterMs) * time.Millisecond)
	if rep := quota(ask); !rep.Allowed {
		t.Fatalf("after the wait: %+v, want allowed", rep)
	}
	if a := llmDo(t, "POST", url+"/v1/chat/completions", "sk-1", body); a.status != 200 {
		t.Fatalf("the call after the wait: %d, want 200 as the report said", a.status)
	}
	if rep := quota("?tokens=5000"); rep.Allowed || !rep.Final {
		t.Fatalf("larger than a quota: %+v, want refused and final", rep)
	}
	for _, bad := range []string{"?tokens=0", "?tokens=-1", "?tokens=9223372036854775807", "?tokens=x"} {
		req, _ := http.NewRequest("GET", url+"/v1/quota"+bad, nil)
		req.Header.Set("Authorization", "Bearer sk-1")
		r := do(t, http.DefaultClient, "GET", url+"/v1/quota"+bad, nil, req.Header)
		if r.status != 400 {
			t.Errorf("quota%s: %d, want 400", bad, r.status)
		}
	}
}

// Cheap before costly: with every token-counting slot taken (a call that
// reached the tokenizer would wait for one), a call without a known key
// gets its 401, and a call a requests policy refuses its 429, at once and
// before its body is read; the 429 takes nothing (a peek). A call that
// must count its tokens waits for a slot, and past the bound is refused
// with 503 in the provider's shape.
func TestLLMCheapBeforeCostly(t *testing.T) {
	url, h, _, _ := llmTestGateway(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
    sk-2: {tenant: globex, plan: pro}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: UPSTREAM, llm: openai, max_body_bytes: 4194304, policies: [rpm, tpm]}
policies:
  rpm: {key: tenant, rate: 1, per: 1m, plans: {pro: 100}, on_missing_key: reject}
  tpm: {key: tenant, cost: tokens, rate: 100000, per: 1m, on_missing_key: reject}
`)
	chat := url + "/v1/chat/completions"
	if a := llmDo(t, "POST", chat, "sk-1", chatCall(10)); a.status != 200 {
		t.Fatalf("first call: %d", a.status)
	}
	h.tokenize = newTokenizeGate(2, time.Hour) // a call that reaches it never returns in time
	for range cap(h.tokenize.slots) {
		h.tokenize.slots <- struct{}{}
	}
	big := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 1<<19) + `"}]}`
	for _, key := range []string{"", "sk-unknown"} {
		if a := llmDo(t, "POST", chat, key, big); a.status != 401 || a.code != "invalid_api_key" {
			t.Fatalf("key %q: got %d %s, want 401 invalid_api_key before the body", key, a.status, a.code)
		}
	}
	a := llmDo(t, "POST", chat, "sk-1", big)
	if a.status != 429 || a.header.Get("x-ratelimit-remaining-requests") != "0" || a.header.Get("x-ratelimit-limit-tokens") != "100000" {
		t.Fatalf("over the requests policy: got %d, headers %v; want 429 with both sets", a.status, a.header)
	}
	// The peek took nothing: the token policy is still full but for the
	// first call.
	if rem, _ := strconv.ParseInt(a.header.Get("x-ratelimit-remaining-tokens"), 10, 64); rem < 100000-200 {
		t.Fatalf("remaining tokens after the refused calls: %d, want nearly 100000", rem)
	}

	// The bound: a call that must count (past countWithoutSlot) waits at
	// most the gate's wait.
	h.tokenize = newTokenizeGate(1, 20*time.Millisecond)
	h.tokenize.slots <- struct{}{}
	mid := pastCountWithoutSlot
	a = llmDo(t, "POST", chat, "sk-2", mid)
	if a.status != 503 || a.typ != "server_error" || a.header.Get("Retry-After") != "1" {
		t.Fatalf("no tokenizing slot within the bound: got %d %s %q, want 503 server_error with Retry-After 1", a.status, a.typ, a.message)
	}
	<-h.tokenize.slots
	if a := llmDo(t, "POST", chat, "sk-2", mid); a.status != 200 {
		t.Fatalf("with a free slot: %d %q, want 200", a.status, a.message)
	}
}

// On an llm route every answer of the gateway has the route's error
// format: a body that is not JSON (400) and a chunked body over
// max_body_bytes (413) too.
func TestLLMBodyErrorsInTheProvidersShape(t *testing.T) {
	url, _, _, _ := llmTestGateway(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: UPSTREAM, llm: openai, max_body_bytes: 1024, policies: [tpm]}
policies:
  tpm: {key: tenant, cost: tokens, rate: 100000, per: 1m, on_missing_key: reject}
`)
	chat := url + "/v1/chat/completions"
	if a := llmDo(t, "POST", chat, "sk-1", "not json"); a.status != 400 || a.typ != "invalid_request_error" || a.gatewayErr {
		t.Fatalf("a body that is not JSON: got %d type %q (gateway shape %v), want 400 in OpenAI's shape", a.status, a.typ, a.gatewayErr)
	}
	// A chunked body: no Content-Length to refuse it by.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`))
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", chat, pr)
	req.Header.Set("Authorization", "Bearer sk-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&b)
	if resp.StatusCode != 413 || b.Error.Type != "invalid_request_error" {
		t.Fatalf("a chunked body over max_body_bytes: got %d type %q, want 413 in OpenAI's shape", resp.StatusCode, b.Error.Type)
	}
}

// gateway_requests_total counts a 401 as its own outcome, not "allowed",
// on a plain route and on an llm route (answered before the body).
func TestUnauthorizedIsItsOwnOutcome(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{}))
	snap := compileYAML(t, `
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: openai, policies: [tpm]}
  - {name: api, match: {path_prefix: /api/}, upstream: `+up.URL+`, policies: [per-tenant]}
policies:
  tpm: {key: tenant, cost: tokens, rate: 100000, per: 1m, on_missing_key: reject}
  per-tenant: {key: tenant, rate: 100, per: 1m, on_missing_key: reject}
`)
	obs := newRecordingObserver()
	srv, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	h.metrics = obs
	if a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-nobody", chatCall(10)); a.status != 401 {
		t.Fatalf("llm route: %d, want 401", a.status)
	}
	if r := do(t, http.DefaultClient, "GET", srv.URL+"/api/x", nil, nil); r.status != 401 {
		t.Fatalf("api route: %d, want 401", r.status)
	}
	for _, route := range []string{"llm", "api"} {
		if got, allowed := obs.get(obs.requests, route+"/unauthorized"), obs.get(obs.requests, route+"/allowed"); got != 1 || allowed != 0 {
			t.Errorf("%s: unauthorized %d, allowed %d; want 1 and 0", route, got, allowed)
		}
	}
}

// on_limit: delay's "delayed" count counts the waiters that then passed,
// not those refused after their wait.
func TestDelayedCountsOnlyWaitersThatPassed(t *testing.T) {
	clock := newTestClock()
	up := newUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	snap := compileYAML(t, `
routes:
  - {name: r, upstream: "`+up.URL+`", match: {path_prefix: /r}, policies: [paced]}
policies:
  paced: {key: ip, rate: 1, per: 1s, burst: 1, on_limit: delay, max_delay: 1s, max_waiters: 2}
`)
	obs := newRecordingObserver()
	srv, h := newGateway(t, snap, newEngine(t, clock), gatewayOpts{})
	tt := &turnTimers{armed: make(chan time.Duration, 16)}
	h.turnAfter, h.metrics = tt.afterFunc, obs
	c := clienttest.New(t, 4)
	get := func() <-chan response {
		ch := make(chan response, 1)
		go func() {
			r, err := tryDo(c, "GET", srv.URL+"/r", "", nil)
			if err != nil {
				t.Error(err)
			}
			ch <- r
		}()
		return ch
	}
	if r := <-get(); r.status != 200 {
		t.Fatalf("first: %d", r.status)
	}
	a, b := get(), get()
	waitArmed(t, tt)
	waitArmed(t, tt)
	clock.Advance(time.Second)
	tt.advance(time.Second) // one token: one passes; the other's next turn is past max_delay
	statuses := map[int]int{}
	for _, ch := range []<-chan response{a, b} {
		statuses[(<-ch).status]++
	}
	if statuses[200] != 1 || statuses[429] != 1 {
		t.Fatalf("the two waiters: %v, want one 200 and one 429", statuses)
	}
	if got := obs.get(obs.policies, "r/paced/delayed"); got != 1 {
		t.Fatalf("delayed counted %d times, want 1 (the waiter that passed)", got)
	}
}

// On Redis, under a flood: 48 concurrent calls of one tenant (28 KiB
// prompts, so their shared policies are peeked before the body) past a
// requests policy of 3, and 16 keyless calls with 1 MiB prompts. The
// requests policy admits its bound; every refused call is answered from
// the peek or the one decision with both header sets, and takes no token
// (the token policy holds exactly the admitted calls' usage, up to its
// refill); every keyless call gets 401.
func TestLLMFloodOnRedisTakesNothingFromRefusedCalls(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 1 << 20}))
	snap := compileYAML(t, `
redis: {addrs: ['127.0.0.1:1']}
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: openai, max_body_bytes: 4194304, policies: [rpm, tpd]}
policies:
  rpm: {key: tenant, algorithm: gcra, rate: 3, per: 1h, on_missing_key: reject}
  tpd: {key: tenant, cost: tokens, algorithm: gcra, rate: 100000, per: 24h, on_missing_key: reject}
`)
	srv, h := newGateway(t, snap, sharedEngine(t), gatewayOpts{})
	settled := make(chan struct{}, 64)
	h.settled = func() { settled <- struct{}{} }
	chat := srv.URL + "/v1/chat/completions"
	// Past peekSharedAbove: the shared policies are peeked before the body.
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 4<<10) + `"}],"max_tokens":100}`
	big := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 1<<17) + `"}]}`
	type result struct {
		key string
		a   llmAnswer
	}
	results := make(chan result, 64)
	start := make(chan struct{})
	for i := range 64 {
		key, b := "sk-1", body
		if i%4 == 3 {
			key, b = "", big
		}
		go func() {
			<-start
			results <- result{key, llmDo(t, "POST", chat, key, b)}
		}()
	}
	close(start)
	var admitted, refused, unauthorized int
	var used int64
	for range 64 {
		r := <-results
		switch {
		case r.key == "" && r.a.status == 401:
			unauthorized++
		case r.a.status == 200:
			admitted++
			used += r.a.usage
		case r.a.status == 429:
			refused++
			if r.a.header.Get("x-ratelimit-remaining-requests") != "0" || r.a.header.Get("x-ratelimit-limit-tokens") != "100000" {
				t.Errorf("a refused call's headers: requests remaining %q, tokens limit %q; want 0 and 100000",
					r.a.header.Get("x-ratelimit-remaining-requests"), r.a.header.Get("x-ratelimit-limit-tokens"))
			}
		default:
			t.Errorf("key %q: %d %s %q", r.key, r.a.status, r.a.code, r.a.message)
		}
	}
	if admitted != 3 || refused != 45 || unauthorized != 16 {
		t.Fatalf("admitted %d, refused %d, unauthorized %d; want 3 (the requests policy's burst), 45 and 16", admitted, refused, unauthorized)
	}
	for range admitted {
		waitSettle(t, settled)
	}
	// What the token policy holds: the admitted calls' usage, less what
	// refilled (100000 a day: about one token a second).
	req, _ := http.NewRequest("GET", srv.URL+"/v1/quota", nil)
	req.Header.Set("Authorization", "Bearer sk-1")
	r := do(t, http.DefaultClient, "GET", srv.URL+"/v1/quota", nil, req.Header)
	var rep struct {
		Policies []struct {
			Policy    string `json:"policy"`
			Remaining int64  `json:"remaining"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(r.body, &rep); err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Policies {
		if p.Policy == "tpd" && (p.Remaining > 100000-used+30 || p.Remaining < 100000-used) {
			t.Fatalf("tokens remaining %d after %d admitted calls using %d: want %d (+ refill)", p.Remaining, admitted, used, 100000-used)
		}
	}
}

// The quota report agrees with the next call on Redis too: the wait it
// gives for a call of N tokens is the call's own retry-after-ms (up to the
// milliseconds between the two), and a call larger than the quota is
// final in both.
func TestQuotaAgreesWithTheNextCallOnRedis(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 1 << 20}))
	snap := compileYAML(t, `
redis: {addrs: ['127.0.0.1:1']}
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: openai, policies: [tpm]}
policies:
  tpm: {key: tenant, cost: tokens, algorithm: gcra, rate: 1000, per: 1m, on_missing_key: reject}
`)
	srv, h := newGateway(t, snap, sharedEngine(t), gatewayOpts{})
	settled := make(chan struct{}, 4)
	h.settled = func() { settled <- struct{}{} }
	chat := srv.URL + "/v1/chat/completions"
	body := chatCall(600)
	n := reservation(t, body)
	quota := func(tokens int64) (allowed, final bool, wait int64) {
		t.Helper()
		hdr := http.Header{"Authorization": {"Bearer sk-1"}}
		r := do(t, http.DefaultClient, "GET", srv.URL+"/v1/quota?tokens="+strconv.FormatInt(tokens, 10), nil, hdr)
		var rep struct {
			Allowed      bool  `json:"allowed"`
			Final        bool  `json:"final"`
			RetryAfterMs int64 `json:"retry_after_ms"`
		}
		if err := json.Unmarshal(r.body, &rep); err != nil || r.status != 200 {
			t.Fatalf("quota: %d %s", r.status, r.body)
		}
		return rep.Allowed, rep.Final, rep.RetryAfterMs
	}
	if ok, _, _ := quota(n); !ok {
		t.Fatal("a fresh quota: refused, want allowed")
	}
	if a := llmDo(t, "POST", chat, "sk-1", body); a.status != 200 {
		t.Fatalf("first call: %d", a.status)
	}
	waitSettle(t, settled)
	ok, final, wait := quota(n)
	a := llmDo(t, "POST", chat, "sk-1", body)
	got, _ := strconv.ParseInt(a.header.Get("retry-after-ms"), 10, 64)
	if ok || final || a.status != 429 || got > wait || got < wait-1000 {
		t.Fatalf("report: allowed %v final %v wait %d ms; the call: %d, retry-after-ms %d; want both refused, the call's wait within a second under the report's",
			ok, final, wait, a.status, got)
	}
	if ok, final, _ := quota(5000); ok || !final {
		t.Fatalf("a call larger than the quota: allowed %v final %v, want refused and final", ok, final)
	}
	if a := llmDo(t, "POST", chat, "sk-1", chatCall(5000)); a.status != 429 || a.header.Get("x-should-retry") != "false" {
		t.Fatalf("the call larger than the quota: %d, x-should-retry %q; want 429 and false", a.status, a.header.Get("x-should-retry"))
	}
}

// On a route with the gateway's own error format a refusal that can never
// pass (a rate of 0) carries x-should-retry: false and keeps its
// Retry-After, which there is what clients read; a plain limit says
// nothing of x-should-retry.
func TestGatewayFormatNeverPassingRefusal(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	snap := compileYAML(t, `
routes:
  - {name: closed, upstream: "`+up.URL+`", match: {path_prefix: /closed}, policies: [closed]}
  - {name: open, upstream: "`+up.URL+`", match: {path_prefix: /open}, policies: [one]}
policies:
  closed: {key: ip, rate: 0, per: 1m}
  one: {key: ip, rate: 1, per: 1m}
`)
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	r := do(t, http.DefaultClient, "GET", srv.URL+"/closed", nil, nil)
	if r.status != 429 || r.header.Get("x-should-retry") != "false" || r.header.Get("Retry-After") == "" {
		t.Fatalf("rate 0: %d, x-should-retry %q, Retry-After %q; want 429, false and a Retry-After", r.status, r.header.Get("x-should-retry"), r.header.Get("Retry-After"))
	}
	do(t, http.DefaultClient, "GET", srv.URL+"/open", nil, nil)
	r = do(t, http.DefaultClient, "GET", srv.URL+"/open", nil, nil)
	if r.status != 429 || r.header.Get("x-should-retry") != "" {
		t.Fatalf("a plain limit: %d, x-should-retry %q; want 429 and none", r.status, r.header.Get("x-should-retry"))
	}
}

// Tokenizing through one slot under 32 concurrent calls (a quarter with
// bodies that are not JSON): every call is answered, and no slot is left
// taken.
func TestTokenizeGateUnderConcurrency(t *testing.T) {
	url, h, _, _ := llmTestGateway(t, `
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: UPSTREAM, llm: openai, policies: [tpm]}
policies:
  tpm: {key: ip, cost: tokens, rate: 100000000, per: 1m}
`)
	h.tokenize = newTokenizeGate(1, time.Minute)
	chat := url + "/v1/chat/completions"
	statuses := make(chan int, 32)
	// Past countWithoutSlot: every call takes a slot.
	big := pastCountWithoutSlot
	for i := range 32 {
		go func() {
			body := big
			if i%4 == 1 {
				body = "not json" + strings.Repeat(" ", 20<<10)
			}
			statuses <- llmDo(t, "POST", chat, "", body).status
		}()
	}
	got := map[int]int{}
	for range 32 {
		got[<-statuses]++
	}
	if got[200] != 24 || got[400] != 8 {
		t.Fatalf("answers %v, want 24 × 200 and 8 × 400", got)
	}
	if n := len(h.tokenize.slots); n != 0 {
		t.Fatalf("%d tokenizing slots still taken, want 0", n)
	}
}

// By default the gate leaves one P to the calls beside the large prompts
// it admits: GOMAXPROCS-1 slots, and one on a single P (no slot would
// refuse every large prompt).
func TestTokenizeGateLeavesAP(t *testing.T) {
	for _, tt := range []struct{ procs, want int }{{1, 1}, {2, 1}, {4, 3}, {64, 63}} {
		if got := defaultTokenizeSlots(tt.procs); got != tt.want {
			t.Errorf("defaultTokenizeSlots(%d) = %d, want %d", tt.procs, got, tt.want)
		}
	}
	if got, want := cap(newTokenizeGate(0, 0).slots), max(runtime.GOMAXPROCS(0)-1, 1); got != want {
		t.Errorf("newTokenizeGate(0, 0) has %d slots, want %d (GOMAXPROCS %d)", got, want, runtime.GOMAXPROCS(0))
	}
	if got := cap(newTokenizeGate(5, 0).slots); got != 5 {
		t.Errorf("newTokenizeGate(5, 0) has %d slots, want the 5 configured", got)
	}
}

// A long prompt is counted at the share of a core that
// server.prompt_count_share gives, read from each snapshot: with 0.5 it
// pauses between its chunks as long as they took (the clock here makes
// each chunk take 1 ms), with 1 it never pauses.
func TestLongPromptCountedAtItsShare(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 1 << 20}))
	config := func(share string) *policies.Snapshot {
		return compileYAML(t, `
server: {prompt_count_share: `+share+`}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: openai, policies: [tpm]}
policies:
  tpm: {key: ip, cost: tokens, rate: 100000000, per: 1m}
`)
	}
	srv, h := newGateway(t, config("0.5"), newEngine(t, newTestClock()), gatewayOpts{})
	var mu sync.Mutex
	var now time.Time
	var pauses []time.Duration
	h.countPace.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Millisecond)
		return now
	}
	h.countPace.Sleep = func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		pauses = append(pauses, d)
		now = now.Add(d)
	}
	// 256 KiB of text: cut every 16 KiB while more than 32 KiB are left (the
	// count cache keeps texts up to 16 KiB, so each call counts it again).
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 256<<10/7) + `"}],"max_tokens":10}`
	call := func() (status int, paused []time.Duration) {
		mu.Lock()
		pauses = nil
		mu.Unlock()
		a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "", body)
		mu.Lock()
		defer mu.Unlock()
		return a.status, pauses
	}
	// 14 chunks of 1 ms owe 14 ms of pauses; each pause's two clock
	// readings take 1 ms of it too, so a pause of 1 ms every other chunk.
	status, paused := call()
	if status != 200 || len(paused) < 6 {
		t.Fatalf("share 0.5: %d, %d pauses (%v); want 200 and a pause every other chunk of the 14", status, len(paused), paused)
	}
	for _, d := range paused {
		if d < time.Millisecond {
			t.Fatalf("share 0.5: a pause of %v after a chunk of 1ms, want at least 1ms", d)
		}
	}
	h.snapshots.(*snapshotHolder).p.Store(config("1"))
	if status, paused := call(); status != 200 || len(paused) != 0 {
		t.Fatalf("share 1, after a reload: %d, %d pauses; want 200 and none", status, len(paused))
	}
}

// A small call counts its tokens without a slot: with every slot held by
// large prompts it passes at once, while a large call waits for a slot and
// is refused when none frees in time.
func TestSmallCallsSkipTheTokenizeGate(t *testing.T) {
	url, h, _, _ := llmTestGateway(t, `
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: UPSTREAM, llm: openai, policies: [tpm]}
policies:
  tpm: {key: ip, cost: tokens, rate: 100000000, per: 1m}
`)
	h.tokenize = newTokenizeGate(2, 50*time.Millisecond)
	for range cap(h.tokenize.slots) { // large prompts being counted
		h.tokenize.slots <- struct{}{}
	}
	chat := url + "/v1/chat/completions"
	statuses := make(chan int, 24)
	for range 24 {
		go func() { statuses <- llmDo(t, "POST", chat, "", chatCall(10)).status }()
	}
	for range 24 {
		if got := <-statuses; got != 200 {
			t.Fatalf("a small call with every slot taken: %d, want 200 (it needs none)", got)
		}
	}
	big := pastCountWithoutSlot
	if a := llmDo(t, "POST", chat, "", big); a.status != http.StatusServiceUnavailable {
		t.Fatalf("a call past %d bytes with every slot taken: %d, want 503 after the wait", countWithoutSlot, a.status)
	}
}

// With the token policy on Redis and the requests policy in-process, a
// small call refused by the requests policy (its shared policies were not
// peeked before its body) still carries the tokens set with the true
// remaining, on an OpenAI route and on an Anthropic one. (A day's window:
// GCRA refills continuously, and the test must see what the calls took.)
func TestLLMHeadersEverySetOnRedis(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 10}))
	claude := newUpstream(t, builtin.NewAnthropicMock(builtin.AnthropicMockConfig{}))
	snap := compileYAML(t, `
redis: {addrs: ['127.0.0.1:1']}
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
    sk-2: {tenant: globex, plan: free}
routes:
  - {name: claude, match: {path_prefix: /anthropic/v1/}, strip_prefix: /anthropic, upstream: `+claude.URL+`, llm: anthropic, policies: [rpm, tpm]}
  - {name: llm, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: openai, policies: [rpm, tpm]}
policies:
  rpm: {key: tenant, rate: 2, per: 1m, on_missing_key: reject}
  tpm: {key: tenant, cost: tokens, algorithm: gcra, rate: 100000, per: 24h, on_missing_key: reject}
`)
	rs := redistest.Start(t)
	client, err := redisclient.New(redisclient.Options{Addrs: []string{rs.Addr()}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	lim := &countingPeeks{Engine: engineOn(t, client)}
	srv, _ := newGateway(t, snap, lim, gatewayOpts{})
	body := chatCall(100)
	for i := range 2 {
		if a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-1", body); a.status != 200 {
			t.Fatalf("call %d: %d, want 200", i+1, a.status)
		}
	}
	a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-1", body)
	rem, err := strconv.ParseInt(a.header.Get("x-ratelimit-remaining-tokens"), 10, 64)
	if a.status != 429 || a.header.Get("x-ratelimit-remaining-requests") != "0" || err != nil ||
		rem < 100_000-2*reservation(t, body) || rem >= 100_000 || a.header.Get("x-ratelimit-limit-tokens") != "100000" {
		t.Fatalf("a requests policy's 429 with the token policy on Redis: %d, remaining-requests %q, limit-tokens %q, remaining-tokens %q; want 429, 0, 100000 and the true remaining in [%d, 100000)",
			a.status, a.header.Get("x-ratelimit-remaining-requests"), a.header.Get("x-ratelimit-limit-tokens"),
			a.header.Get("x-ratelimit-remaining-tokens"), 100_000-2*reservation(t, body))
	}

	msg := `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"Say something about rate limits."}]}`
	claudeDo := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/anthropic/v1/messages", strings.NewReader(msg))
		req.Header.Set("x-api-key", "sk-2")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 2 {
		if resp := claudeDo(); resp.StatusCode != 200 {
			t.Fatalf("claude call %d: %d, want 200", i+1, resp.StatusCode)
		}
	}
	resp := claudeDo()
	rem, err = strconv.ParseInt(resp.Header.Get("anthropic-ratelimit-tokens-remaining"), 10, 64)
	if resp.StatusCode != 429 || resp.Header.Get("anthropic-ratelimit-requests-remaining") != "0" || err != nil || rem <= 100_000-1000 || rem >= 100_000 {
		t.Fatalf("an Anthropic 429 from the requests policy: %d, requests-remaining %q, tokens-remaining %q; want 429, 0 and the token policy's true remaining",
			resp.StatusCode, resp.Header.Get("anthropic-ratelimit-requests-remaining"), resp.Header.Get("anthropic-ratelimit-tokens-remaining"))
	}

	// A flood of such refusals (last: it spends the header peeks' budget)
	// reads Redis for its headers at most
	// headerPeeksPerSecond times a second (plus the burst): 2,000 refusals
	// from 64 clients. (Redis's own count would not show it: concurrent
	// peeks are merged into one script call.)
	before := lim.peeks.Load()
	started := time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 2000 / 64 {
				if a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-1", body); a.status != 429 {
					t.Errorf("the flood: %d, want 429", a.status)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(started)
	bound := int64(headerPeeksPerSecond) * int64(1+math.Ceil(elapsed.Seconds()))
	if got := lim.peeks.Load() - before; got > bound {
		t.Errorf("%d refusals in %v sent Redis %d peeks for their headers, want at most %d", 2000/64*64, elapsed, got, bound)
	}
}

// countingPeeks is the engine, counting the peeks the proxy asks of it
// that read Redis.
type countingPeeks struct {
	*limiter.Engine
	peeks atomic.Int64
}

func (c *countingPeeks) Peek(ctx context.Context, checks []limiter.Check) []limiter.Decision {
	for _, ch := range checks {
		if ch.Rule.Algorithm.Shared() {
			c.peeks.Add(1)
			break
		}
	}
	return c.Engine.Peek(ctx, checks)
}

// A local token policy that refuses after the body leaves a dollar budget
// on Redis unread: the 429 still carries the usd set, read with a peek.
func TestLLMHeadersUnreadBudgetOnRedis(t *testing.T) {
	up := newUpstream(t, builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 10}))
	snap := compileYAML(t, `
redis: {addrs: ['127.0.0.1:1']}
tenants:
  keys:
    sk-1: {tenant: acme, plan: free}
prices:
  default: {input: 0.15, output: 0.6}
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: `+up.URL+`, llm: openai, policies: [tpm, dollars]}
policies:
  tpm: {key: tenant, cost: tokens, rate: 200, per: 24h, on_missing_key: reject}
  dollars: {key: tenant, cost: usd, algorithm: gcra, rate: 1, per: 24h, on_missing_key: reject}
`)
	srv, _ := newGateway(t, snap, sharedEngine(t), gatewayOpts{})
	a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "sk-1", chatCall(500))
	if a.status != 429 || a.header.Get("x-ratelimit-remaining-tokens") == "" || a.header.Get("x-ratelimit-remaining-usd") != "1.000000" {
		t.Fatalf("a local token policy's 429: %d, remaining-tokens %q, remaining-usd %q; want 429, the token set, and the untouched budget 1.000000",
			a.status, a.header.Get("x-ratelimit-remaining-tokens"), a.header.Get("x-ratelimit-remaining-usd"))
	}
}
