package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/llm"
)

// On an llm route a request's token cost is known only after the response:
// the gateway reserves what the request may cost (its prompt's tokens, plus
// its output cap or the route's default_max_tokens), forwards it, reads the
// provider's usage as the response passes (JSON, or the SSE stream's usage
// chunk, which it asks for and hides when the client did not), and settles
// every policy to what the request really cost. A stream cut before its
// usage is charged for the text that passed; an upstream error before any
// output gives the tokens back.

// maxUsageBody bounds how much of a non-streamed response is kept to read
// its usage: a completion is far smaller, and past it the reservation
// stands.
const maxUsageBody = 4 << 20

// reserver is the limiter an llm route needs: one that can settle later.
// *limiter.Engine is one.
type reserver interface {
	Reserve(ctx context.Context, checks []limiter.Check) (limiter.Verdict, *limiter.Reservation, error)
}

// llmCall is one request on an llm route, from its reservation to its
// settlement. The response side is written by the goroutine that copies the
// response, and read after it finished.
type llmCall struct {
	kind      llm.Kind
	req       llm.Request
	maxOutput int64 // the request's cap, or the route's default
	res       *limiter.Reservation
	costs     []policies.Cost // by check
	price     policies.Price  // the model's, for cost: usd
	unpriced  bool            // the price is prices.default's

	status  int                // the upstream's, 0 when it never answered
	stream  *llm.StreamWatcher // an SSE response
	tapped  *usageTap          // a JSON response
	settled bool
	// charged says the call was settled; chargedTokens and chargedMicroUSD
	// are what it cost (for metrics), whatever its policies count.
	charged         bool
	chargedTokens   int64
	chargedMicroUSD int64
}

// llmKind tells the API of a request from its path, or ok false for a path
// that costs no tokens (GET /v1/models, ...).
func llmKind(r *http.Request) (llm.Kind, bool) {
	if r.Method != http.MethodPost {
		return 0, false
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return llm.ChatCompletions, true
	case strings.HasSuffix(p, "/completions"):
		return llm.Completions, true
	case strings.HasSuffix(p, "/responses"):
		return llm.Responses, true
	case strings.HasSuffix(p, "/embeddings"):
		return llm.Embeddings, true
	case strings.HasSuffix(p, "/messages"):
		return llm.AnthropicMessages, true
	}
	return 0, false
}

// readLLMCall reads and parses the body of an LLM request (bounded by the
// route's max_body_bytes), asks a stream for its usage when the client did
// not, and returns the request to forward with the body it will carry. A
// request that is not an LLM call returns a nil call and r itself.
func readLLMCall(w http.ResponseWriter, r *http.Request, route *policies.Route, prices policies.Prices) (*http.Request, *llmCall, int, string) {
	kind, ok := llmKind(r)
	if !ok {
		return r, nil, 0, ""
	}
	r, body, status, msg := readBody(w, r, route)
	if status != 0 {
		return nil, nil, status, msg
	}
	req, err := llm.ParseRequest(kind, body)
	if err != nil {
		return nil, nil, http.StatusBadRequest, err.Error()
	}
	call := &llmCall{kind: kind, req: req, maxOutput: req.MaxOutput}
	if len(prices) > 0 {
		call.price, call.unpriced = prices.For(req.Model)
	}
	if call.maxOutput <= 0 && kind != llm.Embeddings { // an embedding has no output to reserve
		call.maxOutput = route.DefaultMaxTokens * max(req.Choices, 1) // n choices, each up to the default
	}
	if req.Stream && !req.IncludeUsage && (kind == llm.ChatCompletions || kind == llm.Completions) {
		withUsage, added, err := llm.WithIncludeUsage(body)
		if err != nil {
			return nil, nil, http.StatusBadRequest, err.Error()
		}
		r = withBody(r, withUsage)
		call.req.IncludeUsage = !added // the client's own wish decides whether it sees the chunk
	}
	return r, call, 0, ""
}

// reserve is what a policy of cost takes before the call.
func (c *llmCall) reserve(cost policies.Cost) int64 {
	switch cost {
	case policies.CostTokens:
		return c.req.PromptTokens + c.maxOutput
	case policies.CostInputTokens:
		return c.req.PromptTokens
	case policies.CostOutputTokens:
		return c.maxOutput
	case policies.CostUSD:
		// Every input token at the uncached price: the most the call can cost.
		return microUSD(float64(c.req.PromptTokens)*c.price.Input + float64(c.maxOutput)*c.price.Output)
	}
	return 1
}

// microUSD rounds a price in micro-dollars up: a call is never cheaper
// than it was.
func microUSD(f float64) int64 { return int64(math.Ceil(f - 1e-9)) }

// watch wraps the response body so its usage is read as it passes.
func (c *llmCall) watch(resp *http.Response) {
	c.status = resp.StatusCode
	if resp.StatusCode >= 400 {
		return // an error before any output: the settlement gives the tokens back
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		c.stream = llm.NewStreamWatcher(resp.Body, llm.StreamConfig{
			Kind: c.kind, Model: c.req.Model, DropUsageChunk: !c.req.IncludeUsage,
		})
		resp.Body = c.stream
		return
	}
	c.tapped = &usageTap{ReadCloser: resp.Body}
	resp.Body = c.tapped
}

// settle makes every check hold what the call really cost; it runs once,
// after the response was copied (or failed).
func (c *llmCall) settle(ctx context.Context) error {
	if c.settled || c.res == nil {
		return nil
	}
	c.settled = true
	input, cached, output := c.actual()
	c.charged, c.chargedTokens = true, input+output
	c.chargedMicroUSD = microUSD(float64(input-cached)*c.price.Input + float64(cached)*c.price.CachedInput + float64(output)*c.price.Output)
	actual := make([]int64, len(c.costs))
	for i, cost := range c.costs {
		switch cost {
		case policies.CostTokens:
			actual[i] = input + output
		case policies.CostInputTokens:
			actual[i] = input
		case policies.CostOutputTokens:
			actual[i] = output
		case policies.CostUSD:
			actual[i] = microUSD(float64(input-cached)*c.price.Input + float64(cached)*c.price.CachedInput + float64(output)*c.price.Output)
		default:
			actual[i] = 1
		}
	}
	return c.res.Settle(context.WithoutCancel(ctx), actual)
}

// actual is what the call cost in input tokens (cached ones among them) and
// output tokens: the provider's usage when it came; for a stream cut before
// it, the prompt and the text that passed; for a JSON response cut or
// unreadable, the reservation; for an upstream error or no answer, nothing.
func (c *llmCall) actual() (input, cached, output int64) {
	switch {
	case c.status == 0 || c.status >= 400:
		return 0, 0, 0
	case c.stream != nil:
		if u, ok := c.stream.Usage(); ok {
			return u.Input, u.CachedInput, u.Output
		}
		return c.req.PromptTokens, 0, c.stream.Delivered()
	case c.tapped != nil && c.tapped.complete():
		if u, ok := llm.ParseUsage(c.kind, c.tapped.buf.Bytes()); ok {
			return u.Input, u.CachedInput, u.Output
		}
	}
	return c.req.PromptTokens, 0, c.maxOutput
}

// usageTap passes a JSON response through and keeps its first maxUsageBody
// bytes, to read the usage once it has passed.
type usageTap struct {
	io.ReadCloser
	buf  bytes.Buffer
	eof  bool
	over bool
}

func (t *usageTap) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if t.buf.Len()+n <= maxUsageBody {
		t.buf.Write(p[:n])
	} else {
		t.over = true
	}
	if err == io.EOF {
		t.eof = true
	}
	return n, err
}

func (t *usageTap) complete() bool { return t.eof && !t.over }

// modelWarnings logs, once per model, that a model the price table does not
// name was priced at prices.default. Models are the client's to choose, so
// it remembers at most maxModelWarnings of them. The zero value is ready;
// it is safe for concurrent use.
type modelWarnings struct {
	mu   sync.Mutex
	seen map[string]bool
}

const maxModelWarnings = 256

func (m *modelWarnings) warn(log *slog.Logger, model string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[model] || len(m.seen) >= maxModelWarnings {
		return
	}
	if m.seen == nil {
		m.seen = make(map[string]bool)
	}
	m.seen[model] = true
	log.Warn("llm call for a model the price table does not name: priced at prices.default", "model", model)
}
