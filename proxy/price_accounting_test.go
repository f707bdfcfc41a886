package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/llm"
)

// The dollar accounting suite: a $1 daily budget, and for each way a
// provider bills beyond a model's plain text price (a service tier, audio
// output, Anthropic's 1-hour cache writes, a dated snapshot, Anthropic's
// long-context price), 24 calls at once against a provider that bills it
// as documented, on one instance and on two sharing a real Redis. What
// the provider billed for the calls the gateway let through stays within
// the budget (plus what it refilled while the case ran), and /v1/quota
// shows the budget less exactly what the calls were charged.

const priceAccountingCalls = 24

const priceAccountingYAML = `
REDIS
tenants:
  keys: {KEYS}
routes:
  - {name: claude, upstream: "UPSTREAM", llm: anthropic, match: {path_prefix: /v1/messages}, policies: [budget]}
  - {name: priority, upstream: "UPSTREAM", llm: openai, default_service_tier: priority, strip_prefix: /priority, match: {path_prefix: /priority/v1/}, policies: [budget]}
  - {name: llm, upstream: "UPSTREAM", llm: openai, match: {path_prefix: /v1/}, policies: [budget]}
policies:
  budget: {key: tenant, algorithm: ALGO, rate: 1, per: 24h, cost: usd}
prices:
  default: {input: 1, output: 4}
  o3: {input: 2, output: 8}
  o3-pro: {input: 20, output: 80}
  gpt-5: {input: 1.25, cached_input: 0.125, output: 10, tiers: {priority: {input: 2.5, cached_input: 0.25, output: 20}}}
  gpt-4o-audio-preview: {input: 2.5, output: 10, audio_input: 40, audio_output: 80}
  claude-sonnet-4-5: {input: 3, cached_input: 0.3, output: 15, cache_write_5m: 3.75, cache_write_1h: 6}
  claude-sonnet-4: {input: 3, cached_input: 0.3, output: 15, long_context: {threshold: 2000, input: 6, cached_input: 0.6, output: 22.5}}
`

// providerRates is what the mock provider bills a model, in dollars a
// million tokens, as its price page says; the gateway's table above is
// the operator's copy of it.
type providerRates struct {
	input, output, audioOutput, write1h float64
	priority                            *providerRates
	longThreshold                       int64
	long                                *providerRates
}

var providerPrices = map[string]providerRates{
	"o3":                   {input: 2, output: 8},
	"o3-pro-2025-06-10":    {input: 20, output: 80},
	"gpt-5":                {input: 1.25, output: 10, priority: &providerRates{input: 2.5, output: 20}},
	"gpt-4o-audio-preview": {input: 2.5, output: 10, audioOutput: 80},
	"claude-sonnet-4-5":    {input: 3, output: 15, write1h: 6},
	"claude-sonnet-4":      {input: 3, output: 15, longThreshold: 2000, long: &providerRates{input: 6, output: 22.5}},
}

// billingProvider answers chat completions and Anthropic messages as the
// providers do, and bills each call by the price page: the tier it served
// (priority falls back to default on every other call; auto is served at
// the project's default, priority), audio output at its rate, cache writes
// at the 1-hour rate, the whole request at the long-context price past its
// threshold. Prompt tokens are counted with the gateway's counter (the
// builtin mock does the same); each call generates its whole cap, up to
// 5,000 tokens.
type billingProvider struct {
	mu       sync.Mutex
	pico     map[string]int64 // by API key: what was billed
	charge   map[string]int64 // by API key: each call's bill rounded up to a micro-dollar
	priority int
}

func newBillingProvider() *billingProvider {
	return &billingProvider{pico: map[string]int64{}, charge: map[string]int64{}}
}

func (b *billingProvider) billed(key string) (pico, micro int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pico[key], b.charge[key]
}

// bill adds a call's bill, given in micro-dollars (tokens × dollars a
// million), held in pico-dollars.
func (b *billingProvider) bill(key string, micro float64) {
	p := int64(math.Round(micro * 1e6))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pico[key] += p
	b.charge[key] += (p + llm.PicoPerMicro - 1) / llm.PicoPerMicro
}

func (b *billingProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Model       string   `json:"model"`
		ServiceTier string   `json:"service_tier"`
		MaxTokens   int64    `json:"max_tokens"`
		MaxCompl    int64    `json:"max_completion_tokens"`
		Modalities  []string `json:"modalities"`
		Stream      bool     `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rates, ok := providerPrices[req.Model]
	if !ok {
		http.Error(w, "unknown model", http.StatusNotFound)
		return
	}
	out := min(max(req.MaxTokens, req.MaxCompl), 5000) // to the cap: the budget is what stops it
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		b.message(w, r, body, req.Model, rates, out)
		return
	}
	parsed, err := llm.ParseRequest(llm.ChatCompletions, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	prompt := parsed.PromptTokens
	served := req.ServiceTier
	switch served {
	case "", "auto":
		served = "default"
		if r.Header.Get("X-Project-Tier") == "priority" {
			served = "priority" // the project's default tier
		}
	}
	at := rates
	if served == "priority" {
		b.mu.Lock()
		b.priority++
		fallBack := b.priority%2 == 0
		b.mu.Unlock()
		if fallBack || rates.priority == nil {
			served = "default"
		} else {
			at = *rates.priority
		}
	}
	var audioOut int64
	if strings.Contains(strings.Join(req.Modalities, ","), "audio") {
		audioOut = out * 9 / 10 // the spoken answer; its transcript is text
	}
	b.bill(r.Header.Get("X-Case"), float64(prompt)*at.input+float64(out-audioOut)*at.output+float64(audioOut)*at.audioOutput)
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":%d}}`,
		prompt, out, prompt+out, audioOut)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"service_tier\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}\n\n", served, strings.Repeat("word ", 20))
		if r.Header.Get("X-Stream-Length") == "" {
			w.(http.Flusher).Flush() // streamed as the providers do: chunked, without a length
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"service_tier\":%q,\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", served, usage)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":%q,"service_tier":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"length"}],"usage":%s}`,
		req.Model, served, strings.Repeat("word ", 20), usage)
}

// message answers an Anthropic message: a prompt whose blocks ask for a
// 1-hour cache is written to it whole but its last 10 tokens.
func (b *billingProvider) message(w http.ResponseWriter, r *http.Request, body []byte, model string, rates providerRates, out int64) {
	parsed, err := llm.ParseRequest(llm.AnthropicMessages, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	prompt := parsed.PromptTokens
	var written int64
	if strings.Contains(string(body), `"ttl":"1h"`) {
		written = max(prompt-10, 0)
	}
	at := rates
	if rates.long != nil && prompt > rates.longThreshold {
		at = *rates.long // the whole request, output included
	}
	b.bill(r.Header.Get("X-Case"), float64(prompt-written)*at.input+float64(written)*rates.write1h+float64(out)*at.output)
	if strings.Contains(string(body), `"stream":true`) {
		// The input side in message_start, the output in message_delta.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":%q,\"usage\":"+
			"{\"input_tokens\":%d,\"cache_creation_input_tokens\":%d,\"cache_read_input_tokens\":0,\"cache_creation\":{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":%d},\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\n",
			model, prompt-written, written, written)
		w.(http.Flusher).Flush()
		fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"%s\"}}\n\n", strings.Repeat("word ", 20))
		fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":%d}}\n\n", out)
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"m","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"%s"}],"stop_reason":"max_tokens",`+
		`"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":%d},"output_tokens":%d,"service_tier":"standard"}}`,
		model, strings.Repeat("word ", 20), prompt-written, written, written, out)
}

type priceCase struct {
	name, path string
	body       func(i int) string
}

func priceCases() []priceCase {
	chat := func(model, extra string) func(int) string {
		return func(int) string {
			return `{"model":"` + model + `","messages":[{"role":"user","content":"Tell me about rate limits."}]` + extra + `}`
		}
	}
	long := strings.Repeat("The gateway keeps every tenant within its budget. ", 60) // about 540 tokens
	return []priceCase{
		{"service_tier priority, served at priority or default", "/v1/chat/completions", func(i int) string {
			return chat("gpt-5", fmt.Sprintf(`,"service_tier":"priority","max_completion_tokens":4000,"stream":%v`, i%2 == 0))(i)
		}},
		{"service_tier auto at a priority project", "/priority/v1/chat/completions", chat("gpt-5", `,"service_tier":"auto","max_completion_tokens":4000`)},
		{"audio output, streamed or not", "/v1/chat/completions", func(i int) string {
			return chat("gpt-4o-audio-preview", fmt.Sprintf(`,"modalities":["text","audio"],"audio":{"voice":"alloy","format":"pcm16"},"max_tokens":4000,"stream":%v`, i%2 == 0))(i)
		}},
		{"anthropic cache writes with ttl 1h, streamed or not", "/v1/messages", func(i int) string {
			return `{"model":"claude-sonnet-4-5","max_tokens":1000,"stream":` + fmt.Sprint(i%2 == 0) + `,"system":[{"type":"text","text":"` + strings.Repeat(long, 30) +
				`","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":"Summarize."}]}`
		}},
		{"a dated snapshot", "/v1/chat/completions", chat("o3-pro-2025-06-10", `,"max_completion_tokens":4000`)},
		{"anthropic long context", "/v1/messages", func(int) string {
			return `{"model":"claude-sonnet-4","max_tokens":3000,"messages":[{"role":"user","content":"` + strings.Repeat(long, 5) + `"}]}`
		}},
	}
}

func TestDollarBudgetAtTheTierModalityAndPriceBilled(t *testing.T) {
	provider := newBillingProvider()
	up := newUpstream(t, provider).URL
	cases := priceCases()
	for _, topo := range []string{"one instance", "two instances on redis"} {
		t.Run(topo, func(t *testing.T) {
			engines, redisLine, algo := accountingTopology(t, topo)
			keys := make([]string, len(cases))
			var entries []string
			for i := range cases {
				keys[i] = fmt.Sprintf("sk-%d-%d", len(engines), i)
				entries = append(entries, fmt.Sprintf("%s: {tenant: t%d-%d}", keys[i], len(engines), i))
			}
			yaml := strings.NewReplacer("REDIS", redisLine, "ALGO", algo, "KEYS", strings.Join(entries, ", ")).Replace(priceAccountingYAML)
			var bases []string
			var settled []<-chan struct{}
			for _, e := range engines {
				base, ch := gatewayOn(t, yaml, up, e)
				bases, settled = append(bases, base), append(settled, ch)
			}
			for ci, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					key := keys[ci]
					start := time.Now()
					statuses := runPriceCase(t, bases, key, c)
					elapsed := time.Since(start)
					waitSettled(t, settled, statuses[http.StatusOK])
					pico, charged := provider.billed(key)
					refill := int64(0)
					if len(engines) > 1 {
						refill = int64(math.Ceil(1e6 * elapsed.Seconds() / 86400))
					}
					t.Logf("%d calls: %v; billed $%.6f of the $1 budget (+%d µ$ refilled)", priceAccountingCalls, statuses, float64(pico)/1e12, refill)
					if statuses[http.StatusOK] == 0 || statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != priceAccountingCalls {
						t.Errorf("got %v, want calls answered and the rest refused with 429", statuses)
					}
					if pico > (1_000_000+refill)*llm.PicoPerMicro {
						t.Errorf("the provider billed $%.6f for the admitted calls, past the $1 budget", float64(pico)/1e12)
					}
					status, rep := quotaOf(t, bases[0], key)
					if status != http.StatusOK || len(rep.Policies) != 1 {
						t.Fatalf("/v1/quota: got %d %+v", status, rep)
					}
					// The quota shows the budget less what the calls were
					// charged: each its bill rounded up to a micro-dollar
					// (plus, on Redis's clock, what refilled since).
					got, want := rep.Policies[0].Remaining, 1_000_000-charged
					if got < want || got > want+refill+int64(math.Ceil(1e6*time.Since(start).Seconds()/86400))*int64(len(engines)-1) {
						t.Errorf("/v1/quota: %d µ$ remaining, want %d: the budget less the %d µ$ charged", got, want, charged)
					}
				})
			}
		})
	}
}

// runPriceCase sends the case's calls at once, alternating between the
// gateways, as key, and counts the answers by status.
func runPriceCase(t *testing.T, bases []string, key string, c priceCase) map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range priceAccountingCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, bases[i%len(bases)]+c.path, strings.NewReader(c.body(i)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Case", key) // the provider's bill, by case
			if i%4 == 0 {
				// Half the streams come whole, with a Content-Length, as
				// some servers send them.
				req.Header.Set("X-Stream-Length", "1")
			}
			if strings.HasPrefix(c.path, "/priority/") {
				req.Header.Set("X-Project-Tier", "priority") // the upstream project's setting
			}
			setCallerKey(req, c.path, key)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Error(err)
			}
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("%d %s", resp.StatusCode, b)
			}
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return statuses
}

// waitSettled waits until the gateways settled n calls between them.
func waitSettled(t *testing.T, chs []<-chan struct{}, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for got := 0; got < n; {
		select {
		case <-chs[0]:
			got++
		case <-chs[len(chs)-1]:
			got++
		case <-timeout:
			t.Fatalf("settled %d calls, want %d", got, n)
		}
	}
}

// What the model's entry cannot price is refused before anything is
// reserved or forwarded: a tier it does not name, audio it has no price
// for (sent or asked back), an auto call on a route whose default tier it
// lacks.
func TestDollarRouteRefusesWhatItCannotPrice(t *testing.T) {
	provider := newBillingProvider()
	var reached atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		provider.ServeHTTP(w, r)
	})).URL
	yaml := strings.NewReplacer("REDIS", "", "ALGO", "token_bucket", "KEYS", "sk-r: {tenant: r}").Replace(priceAccountingYAML)
	base, _ := gatewayOn(t, yaml, up, newEngine(t, newTestClock()))
	audio := `{"type":"input_audio","input_audio":{"format":"wav","data":"` + strings.Repeat("AAAA", 100) + `"}}`
	for _, tt := range []struct{ name, path, body, want string }{
		{"flex, not priced", "/v1/chat/completions", `{"model":"gpt-5","service_tier":"flex","messages":[{"role":"user","content":"hi"}]}`, `service_tier \"flex\"`},
		{"audio back from a text model", "/v1/chat/completions", `{"model":"gpt-5","modalities":["text","audio"],"messages":[{"role":"user","content":"hi"}]}`, "audio output"},
		{"audio sent to a text model", "/v1/chat/completions", `{"model":"o3","messages":[{"role":"user","content":[` + audio + `]}]}`, "audio input"},
		{"auto at a priority project, no priority price", "/priority/v1/chat/completions", `{"model":"o3","messages":[{"role":"user","content":"hi"}]}`, `service_tier \"priority\"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, http.DefaultClient, http.MethodPost, base+tt.path, strings.NewReader(tt.body),
				http.Header{"Authorization": {"Bearer sk-r"}, "Content-Type": {"application/json"}})
			if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), tt.want) {
				t.Errorf("got %d %s, want 400 naming %s", r.status, r.body, tt.want)
			}
		})
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d refused calls reached the upstream", n)
	}
	if status, rep := quotaOf(t, base, "sk-r"); status != http.StatusOK || rep.Policies[0].Remaining != 1_000_000 {
		t.Errorf("/v1/quota: got %d %+v, want the whole $1 left", status, rep)
	}
}

// explain names the entry a call is priced by and the tiers it reserves at.
func TestExplainNamesThePrice(t *testing.T) {
	yaml := strings.NewReplacer("REDIS", "", "ALGO", "token_bucket", "KEYS", "sk-e: {tenant: e}").Replace(priceAccountingYAML)
	snap := compileYAML(t, strings.ReplaceAll(yaml, "UPSTREAM", "http://127.0.0.1:1"))
	long := strings.Repeat("The gateway keeps every tenant within its budget. ", 300)
	for _, tt := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"o3-pro-2025-06-10","messages":[{"role":"user","content":"hi"}]}`, "prices.o3-pro at service_tier default"},
		{"/v1/chat/completions", `{"model":"gpt-5","service_tier":"priority","messages":[{"role":"user","content":"hi"}]}`,
			"prices.gpt-5 at service_tier priority (or default, which it may fall back to: reserved at the dearer)"},
		{"/priority/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, "prices.gpt-5 at service_tier priority"},
		{"/v1/messages", `{"model":"claude-sonnet-4-20250514","max_tokens":10,"messages":[{"role":"user","content":"` + long + `"}]}`,
			"prices.claude-sonnet-4 at service_tier default, at the long-context price"},
	} {
		r := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
		r.Header.Set("Authorization", "Bearer sk-e")
		r.Header.Set("X-Api-Key", "sk-e")
		r.Header.Set("Content-Type", "application/json")
		e := Explain(snap, r, ExplainOptions{ReadBody: true})
		if e.LLM == nil || !strings.HasPrefix(e.LLM.Price, tt.want) {
			t.Errorf("%s: got %+v, want a price starting %q", tt.body[:40], e.LLM, tt.want)
		}
	}
}
