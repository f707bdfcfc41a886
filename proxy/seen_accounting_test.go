package proxy

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/llm"
)

const seenAccountingYAML = `
REDIS
tenants:
  keys: {KEYS}
routes:
  - {name: claude, upstream: "CLAUDE", llm: anthropic, match: {path_prefix: /v1/messages}, policies: [quota]}
  - {name: llm, upstream: "UPSTREAM", llm: openai, match: {path_prefix: /v1/}, policies: [quota]}
policies:
  quota: {key: tenant, algorithm: ALGO, rate: 10000, per: 1h, cost: tokens}
`

// seenQuota is the tokens quota of the suites below.
const seenQuota = 10_000

// streamingProvider streams 200 chat chunks of one token each and ends as
// its request's X-End header says: "error", an error event (the stream
// stops there); "error, usage of nothing", an error event and then a usage
// of zero tokens; "low usage", a usage that tells the prompt but a single
// output token. It bills as a provider does, what it generated: the
// prompt by OpenAI's formula and every chunk it sent.
type streamingProvider struct {
	input, output, calls atomic.Int64
}

const streamedChunks = 200

func (p *streamingProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, err := llm.ParseRequest(llm.ChatCompletions, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.calls.Add(1)
	p.input.Add(req.PromptTokens)
	w.Header().Set("Content-Type", "text/event-stream")
	for range streamedChunks {
		p.output.Add(1)
		fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tenant"},"finish_reason":null}]}`+"\n\n")
	}
	switch r.Header.Get("X-End") {
	case "error":
		fmt.Fprint(w, `data: {"error":{"message":"overloaded","type":"server_error"}}`+"\n\n")
	case "error, usage of nothing":
		fmt.Fprint(w, `data: {"error":{"message":"overloaded","type":"server_error"}}`+"\n\n"+
			`data: {"id":"c","choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`+"\n\n")
	case "low usage":
		fmt.Fprintf(w, `data: {"id":"c","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}`+"\n\ndata: [DONE]\n\n",
			req.PromptTokens, req.PromptTokens+1)
	}
}

func (p *streamingProvider) bill() int64 { return p.input.Load() + p.output.Load() }

// A call is charged at least what it was seen to deliver, at 64 calls at
// once, on one instance and on two sharing a real Redis, against a quota
// of 10,000 tokens: a stream that ends in an error event after its
// content (without a usage: charged its reservation; with a usage of
// nothing: its prompt estimate and what it delivered), and one whose usage
// is lower than what it streamed (charged the prompt and what was seen). What the
// provider billed (its prompt and every token it sent) stays within the
// quota, and /v1/quota shows the quota less at least that: each call was
// charged what it was seen to deliver.
func TestWhatWasSeenIsChargedAtSixtyFourCalls(t *testing.T) {
	provider := &streamingProvider{}
	up := newUpstream(t, provider).URL
	body := func(int) string {
		return `{"model":"gpt-4o-mini","max_tokens":500,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Tell me about rate limits."}]}`
	}
	// Each chunk's text is one token: what a client saw is its chunks.
	if n := llm.CountTokens("gpt-4o-mini", " tenant"); n != 1 {
		t.Fatalf("a chunk is %d tokens, want 1", n)
	}
	seen := func(b []byte) int64 { return int64(bytes.Count(b, []byte(`"content":" tenant"`))) }
	cases := []string{"error", "error, usage of nothing", "low usage"}
	runSeenSuite(t, up, up, len(cases), func(t *testing.T, bases []string, settled []<-chan struct{}, key func(int) string) {
		for ci, end := range cases {
			t.Run(end, func(t *testing.T) {
				before := provider.bill()
				start := time.Now()
				statuses, saw := runKeyedCalls(t, bases, "/v1/chat/completions", key(ci), body, http.Header{"X-End": {end}}, seen)
				waitSettled(t, settled, statuses[http.StatusOK])
				checkSeenCase(t, bases[0], key(ci), len(bases), start, statuses, provider.bill()-before, saw)
				if want := int64(statuses[http.StatusOK]) * streamedChunks; saw != want {
					t.Errorf("the clients saw %d tokens, want the %d streamed", saw, want)
				}
			})
		}
	})
}

// runSeenSuite runs suite on one instance and on two sharing a real Redis,
// with the gateways' routes to up (OpenAI) and claude (Anthropic), and a key of
// its own for each of cases.
func runSeenSuite(t *testing.T, up, claude string, cases int, suite func(t *testing.T, bases []string, settled []<-chan struct{}, key func(int) string)) {
	for _, topo := range []string{"one instance", "two instances on redis"} {
		t.Run(topo, func(t *testing.T) {
			engines, redisLine, algo := accountingTopology(t, topo)
			key := func(i int) string { return fmt.Sprintf("sk-%d-%d", len(engines), i) }
			var entries []string
			for i := range cases {
				entries = append(entries, fmt.Sprintf("%s: {tenant: t%d-%d}", key(i), len(engines), i))
			}
			yaml := strings.NewReplacer("REDIS", redisLine, "ALGO", algo, "CLAUDE", claude,
				"KEYS", strings.Join(entries, ", ")).Replace(seenAccountingYAML)
			var bases []string
			var settled []<-chan struct{}
			for _, e := range engines {
				base, ch := gatewayOn(t, yaml, up, e)
				bases, settled = append(bases, base), append(settled, ch)
			}
			suite(t, bases, settled, key)
		})
	}
}

// checkSeenCase checks a case of the suites above: some calls answered and
// the rest refused with 429; what the upstream billed within the quota
// plus what it refilled since start; and the quota's remaining tokens at
// most the quota less what was billed (plus the refill): every call was
// charged at least what it was billed.
func checkSeenCase(t *testing.T, base, key string, instances int, start time.Time, statuses map[int]int, billed, seen int64) {
	t.Helper()
	refill := int64(0)
	if instances > 1 {
		refill = int64(math.Ceil(seenQuota * time.Since(start).Seconds() / 3600))
	}
	status, rep := quotaOf(t, base, key)
	if status != http.StatusOK || len(rep.Policies) != 1 {
		t.Fatalf("/v1/quota: got %d %+v", status, rep)
	}
	charged := seenQuota - rep.Policies[0].Remaining
	t.Logf("%d calls: %v; billed %d of %d (+%d refilled), seen %d output, charged %d", accountingCalls, statuses, billed, seenQuota, refill, seen, charged)
	if statuses[http.StatusOK] == 0 || statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != accountingCalls {
		t.Errorf("got %v, want calls answered and the rest refused with 429", statuses)
	}
	if billed > seenQuota+refill {
		t.Errorf("the upstream billed %d for the admitted calls, past the quota %d + %d refilled", billed, seenQuota, refill)
	}
	if charged+refill < billed || charged+refill < seen {
		t.Errorf("charged %d (+%d refilled), want at least the %d billed and the %d seen", charged, refill, billed, seen)
	}
}

// runKeyedCalls sends 64 calls at once with key, alternating between the
// gateways, and counts the answers by status and what seen counts in the
// answered ones.
func runKeyedCalls(t *testing.T, bases []string, path, key string, body func(int) string, header http.Header, seen func([]byte) int64) (map[int]int, int64) {
	var mu sync.Mutex
	statuses := map[int]int{}
	var total atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range accountingCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, bases[i%len(bases)]+path, strings.NewReader(body(i)))
			for k, v := range header {
				req.Header[k] = v
			}
			req.Header.Set("Content-Type", "application/json")
			setCallerKey(req, path, key)
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
			if resp.StatusCode == http.StatusOK {
				total.Add(seen(b))
			}
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return statuses, total.Load()
}
