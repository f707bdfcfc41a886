package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// On an llm route a request's token cost is known only after the response:
// the gateway reserves an upper bound of what the provider may bill (the
// prompt's tokens, non-text parts by their model family's bound, plus the
// output cap, which a call without one is given in its body), forwards it,
// reads the provider's usage as the response passes (JSON, or the SSE
// stream's usage chunk, which it asks for and hides when the client did
// not), and settles every policy to what the request really cost. A call
// that ends without usage (a cut stream, an unreadable answer, no answer
// after the request was sent) is charged its reservation, unless its
// policies opt for what was delivered; an upstream error status, or a
// connection that was never made, gives the tokens back.

// maxUsageBody bounds how much of a non-streamed response is kept to read
// its usage: a completion is far smaller, and past it the reservation
// stands.
const maxUsageBody = 4 << 20

// reserver is what an enforced stream's meter needs of the limiter: its
// later windows are reserved as the output passes (see Limiter).
type reserver interface {
	Reserve(ctx context.Context, checks []limiter.Check) (limiter.Verdict, *limiter.Reservation, error)
}

// llmCall is one request on an llm route, from its reservation to its
// settlement. The response side is written by the goroutine that copies the
// response, and read after it finished.
type llmCall struct {
	kind llm.Kind
	// fixed is the operator's endpoint of a call at a fixed cost, which
	// reserves and is charged that cost; nil for a call read by kind.
	fixed     *llm.Endpoint
	req       llm.Request
	maxOutput int64 // the request's cap, or the route's default
	res       *limiter.Reservation
	costs     []policies.Cost // by check
	price     policies.Price  // the model's, for cost: usd
	unpriced  bool            // the price is prices.default's
	reach     llm.Rates       // the price's rates the call may be billed at (see priceFor)
	// delivered says, by cost, that every policy of that cost opted to
	// charge a call without usage what it delivered (charge_without_usage).
	delivered deliveredCosts
	// upstreamErr is the error that ended the exchange before a response.
	upstreamErr error
	// unreadable says the answer came in an encoding the gateway cannot
	// read: nothing of it was delivered, and its reservation is charged.
	unreadable bool

	// meter takes a stream's output a window at a time (enforce: stream).
	meter *streamMeter

	status  int                // the upstream's, 0 when it never answered
	stream  *llm.StreamWatcher // an SSE response
	tapped  *teeBody           // a JSON response, its first maxUsageBody bytes: tap
	tap     teeBody
	sniffed sniffedBody
	settled bool
	// charged says the call was settled; chargedUsage, chargedTokens and
	// chargedMicroUSD are what it cost (for metrics and traces), whatever
	// its policies count.
	charged         bool
	chargedUsage    usage
	chargedTokens   int64
	chargedMicroUSD int64
}

// readCall reads an llm call's body and counts its tokens, at most the
// Handler's slots at a time (Explain counts at once), and fits the call to
// its route (see forRoute).
func (pl *planner) readCall(p *plan) answer {
	if p.endpoint.Bound == llm.BoundFixed {
		// The operator declared its cost: its body is forwarded unread.
		p.call = &llmCall{fixed: p.endpoint, delivered: chargeDelivered(p.route)}
		return answer{}
	}
	rq, body, status, msg := readBodyUpTo(pl.w, p.r, bodyLimit(p.route, p.r.Method, p.r.URL.Path))
	if status != 0 {
		return answer{status: status, msg: msg}
	}
	var lim reserver // none in Explain: a stream's later windows are never granted
	release := func() {}
	if h := pl.h; h != nil && len(body) > countWithoutSlot {
		var ok bool
		if release, ok = h.tokenize.enter(p.r.Context()); !ok {
			if p.r.Context().Err() != nil {
				return answer{status: statusClientClosed}
			}
			return answer{status: http.StatusServiceUnavailable, retry: true,
				msg: fmt.Sprintf("the gateway is counting the tokens of %d other calls and none finished within %s; retry shortly",
					cap(h.tokenize.slots), h.tokenize.wait)}
		}
	}
	var pace llm.Pace // Explain counts at once
	if pl.h != nil {
		lim = pl.h.limiter
		if c := p.snap.Config; c != nil { // nil in a snapshot built by hand: no pause
			pace = pl.h.countPace
			pace.Share = c.Server.PromptCountShare
		}
	}
	out, call, status, msg := func() (*http.Request, *llmCall, int, string) {
		defer release()
		return readLLMCall(pl.w, rq, p.kind, p.route, p.snap.Prices, pace)
	}()
	if status != 0 {
		return answer{status: status, msg: msg}
	}
	if pl.h != nil && call.unpriced {
		pl.h.unpriced.warn(pl.h.log, call.req.Model)
	}
	if status, msg := call.forRoute(out, p.route, lim); status != 0 {
		return answer{status: status, msg: msg}
	}
	p.r, p.call = out, call
	return answer{}
}

// readLLMCall reads and parses the body of an LLM request (bounded by the
// route's max_body_bytes), bounds what it can be billed (on a route that
// counts tokens: an output cap for a call without one, unsized inputs
// refused or bounded, upgrades refused), asks a stream for its usage when
// the client did not, and returns the request to forward with the body it
// will carry; a long prompt is counted at pace.
func readLLMCall(w http.ResponseWriter, r *http.Request, kind llm.Kind, route *policies.Route, prices policies.Prices, pace llm.Pace) (*http.Request, *llmCall, int, string) {
	r, body, status, msg := readBody(w, r, route)
	if status != 0 {
		return nil, nil, status, msg
	}
	req, err := llm.ParseCall(kind, r.Header.Get("Content-Type"), body, deployments(r, route), route.Models, pace)
	if err != nil {
		return nil, nil, http.StatusBadRequest, err.Error()
	}
	call := &llmCall{kind: kind, req: req, maxOutput: req.MaxOutput, delivered: chargeDelivered(route)}
	if msg := call.bindUnsized(route); msg != "" {
		return nil, nil, http.StatusBadRequest, msg
	}
	if msg := call.priceFor(route, prices); msg != "" {
		return nil, nil, http.StatusBadRequest, msg
	}
	if !req.HasCap && req.CapField != "" && countsTokens(route) {
		// The call is given the cap it is reserved for: without one the
		// provider generates until the model stops, past any reservation.
		// A route that counts no tokens has nothing to bound.
		per := route.DefaultMaxTokens
		if per <= 0 {
			per = req.Family.DefaultMaxTokens
		}
		per = min(per, req.Family.MaxOutputTokens)
		capped, err := llm.WithOutputCap(body, req.CapField, per)
		if err != nil {
			return nil, nil, http.StatusBadRequest, err.Error()
		}
		body = capped
		r = withBody(r, body)
		call.maxOutput = llm.MulSat(per, max(req.Choices, 1)) // n choices, each up to the cap
	}
	if req.OtherCap != "" && countsTokens(route) {
		// Both chat caps, unequal: the call reserved the larger, and the
		// smaller field is raised to it, so the upstream is held to the
		// reserved cap whichever field it reads. (MaxOutput is the cap
		// times the choices, exactly: both are bounded far below overflow.)
		raised, err := llm.SetOutputCap(body, req.OtherCap, req.MaxOutput/max(req.Choices, 1))
		if err != nil {
			return nil, nil, http.StatusBadRequest, err.Error()
		}
		body = raised
		r = withBody(r, body)
	}
	if req.PredictionTokens > 0 {
		// What of a prediction the answer does not use is billed as
		// output, past the cap: it is reserved as output too.
		call.maxOutput = llm.AddSat(call.maxOutput, llm.MulSat(req.PredictionTokens, max(req.Choices, 1)))
	}
	if req.Stream && !req.IncludeUsage && (kind == llm.ChatCompletions || kind == llm.Completions) &&
		(route.Provider == nil || route.Provider.AsksUsage(r)) {
		withUsage, added, err := llm.WithIncludeUsage(body)
		if err != nil {
			return nil, nil, http.StatusBadRequest, err.Error()
		}
		r = withBody(r, withUsage)
		call.req.IncludeUsage = !added // the client's own wish decides whether it sees the chunk
	}
	return r, call, 0, ""
}

// forRoute fits an llm call to its route: an Anthropic prompt is reserved by
// its byte bound (Claude's tokenizer is not public), and enforce: stream
// meters a stream. A status other than 0 refuses the call with msg.
func (c *llmCall) forRoute(r *http.Request, route *policies.Route, lim reserver) (int, string) {
	if c.kind == llm.AnthropicMessages {
		var held []byte
		if body, ok := r.Body.(*heldBody); ok {
			held = body.b
		}
		p, err := llm.ParseAnthropicPrompt(held, c.req.Family)
		if err != nil {
			return http.StatusBadRequest, err.Error()
		}
		c.req.PromptTokens = p.Bound
	}
	c.enforceStream(r.Context(), route, lim)
	return 0, ""
}

// deployments is how a call on route names its model where the route's
// API names deployments (nil elsewhere): the path's deployment
// (/openai/deployments/{deployment}/...) in place of the body's model,
// else the body's model, each read through routes[].deployments; a route
// that maps none reads a deployment as the model of its name. A
// deployment the map lacks cannot be priced, and is refused.
func deployments(r *http.Request, route *policies.Route) llm.Rename {
	api := routeAPI(route)
	if !api.Deployments() {
		return nil
	}
	path := upstreamPath(route, r.URL.Path)
	inPath := ""
	if ep := api.Lookup(r.Method, path); ep != nil {
		inPath = llm.Segment(ep.Path, path, "deployment")
	}
	return func(d string) (string, error) {
		if inPath != "" {
			d = inPath
		}
		if len(route.Deployments) == 0 {
			return d, nil
		}
		model, ok := route.Deployments[d]
		if !ok {
			return "", fmt.Errorf("deployment %q is not one of the route's deployments: its model, and so its price, is unknown", d)
		}
		return model, nil
	}
}

// deliveredCosts says, by cost that counts tokens, whether every policy of
// a route of that cost opted to charge a call without usage what it
// delivered (charge_without_usage). A value, not a map: every call builds
// one.
type deliveredCosts struct {
	counts bool    // some policy counts tokens
	seen   [4]bool // by tokenCostSlot
	opted  [4]bool
}

// tokenCostSlot numbers the costs that count tokens; ok is false for others.
func tokenCostSlot(c policies.Cost) (int, bool) {
	switch c {
	case policies.CostTokens:
		return 0, true
	case policies.CostInputTokens:
		return 1, true
	case policies.CostOutputTokens:
		return 2, true
	case policies.CostUSD:
		return 3, true
	}
	return 0, false
}

// of reports whether every policy of cost opted for delivered.
func (d *deliveredCosts) of(c policies.Cost) bool {
	i, ok := tokenCostSlot(c)
	return ok && d.opted[i]
}

// chargeDelivered says, by cost, whether every policy of route of that
// cost opted to charge a call without usage what it delivered.
func chargeDelivered(route *policies.Route) deliveredCosts {
	var out deliveredCosts
	for _, p := range route.Policies {
		i, ok := tokenCostSlot(p.Cost)
		if !ok || !p.Cost.CountsTokens() {
			continue
		}
		out.counts = true
		if !out.seen[i] || out.opted[i] {
			out.seen[i], out.opted[i] = true, p.ChargeDelivered
		}
	}
	return out
}

// bindUnsized bounds what the call makes the provider bill that its body
// does not hold (a previous response, a stored prompt, a built-in tool's
// results): on a route that counts tokens it is refused, or with
// unsized_input: context_window reserved at the model's context window per
// model turn. It returns the refusal's message, "" to go on.
func (c *llmCall) bindUnsized(route *policies.Route) string {
	if len(c.req.Unsized) == 0 || !countsTokens(route) {
		return ""
	}
	what := strings.Join(c.req.Unsized, ", ")
	if !route.UnsizedContext {
		return fmt.Sprintf("this route caps tokens, and the gateway cannot see how many tokens %s will be billed: "+
			"send the whole input in the request, or ask the operator for unsized_input: context_window", what)
	}
	turns := int64(1)
	for _, u := range c.req.Unsized {
		if strings.HasPrefix(u, "tools[") || u == "mcp_servers" {
			// Each built-in tool call is another model turn, billed its
			// whole context again.
			if c.req.MaxToolCalls == 0 {
				return fmt.Sprintf("this route caps tokens and %s may call tools without end: set max_tool_calls", what)
			}
			turns = llm.AddSat(c.req.MaxToolCalls, 1)
			break
		}
	}
	c.req.PromptTokens = llm.AddSat(c.req.PromptTokens, llm.MulSat(turns, c.req.Family.ContextWindow))
	return ""
}

// priceFor finds the call's price in prices and, on a route with a usd
// policy, the rates it may be billed at (its reach): the dearest of the
// tiers it may be served at, its modalities, the long-context price when
// its input may pass the threshold. What the price cannot bound (a tier or
// audio the entry does not price) is refused: it returns the message for
// the client's 400, "" to go on.
func (c *llmCall) priceFor(route *policies.Route, prices policies.Prices) string {
	if len(prices) == 0 {
		return ""
	}
	c.price, c.unpriced = prices.For(c.req.Model)
	if !countsUSD(route) || c.req.UnitMicroUSD > 0 {
		return ""
	}
	reach, err := c.price.Reach(llm.Ask{
		Kind:          c.kind,
		ServiceTier:   c.req.ServiceTier,
		DefaultTier:   route.DefaultTier,
		AudioInput:    c.req.AudioInput,
		AudioOutput:   c.req.AudioOutput,
		PromptTokens:  c.req.PromptTokens,
		ContextWindow: c.req.Family.ContextWindow,
	})
	if err != nil {
		return "this route caps dollars, and " + err.Error()
	}
	c.reach = reach
	return ""
}

// countsUSD reports whether a policy of route counts dollars.
func countsUSD(route *policies.Route) bool {
	for _, p := range route.Policies {
		if p.Cost == policies.CostUSD {
			return true
		}
	}
	return false
}

// priceNote says, for explain, which entry of prices the call is priced by
// and at which tiers it reserves; "" on a route without a usd policy or
// prices.
func (c *llmCall) priceNote(route *policies.Route) string {
	if !countsUSD(route) || c.price.Entry == "" {
		return ""
	}
	if c.req.UnitMicroUSD > 0 {
		return "per unit (an image, a character of speech), not by the price table"
	}
	tier := c.req.ServiceTier
	if tier == "" || tier == "auto" {
		tier = route.DefaultTier
	}
	if tier == "" {
		tier = "default"
	}
	s := "prices." + c.price.Entry + " at service_tier " + tier
	if tier == "priority" || tier == "scale" {
		s += " (or default, which it may fall back to: reserved at the dearer)"
	}
	if c.price.MayReachLongContext(c.req.PromptTokens) {
		s += ", at the long-context price (its input may pass the threshold)"
	}
	return s
}

// reserve is what a policy of cost takes before the call. The sums
// saturate: a cost past what int64 holds is refused, never wrapped.
func (c *llmCall) reserve(cost policies.Cost) int64 {
	if c.fixed != nil {
		return fixedCost(c.fixed, cost)
	}
	switch cost {
	case policies.CostTokens:
		return llm.AddSat(c.req.PromptTokens, c.maxOutput)
	case policies.CostInputTokens:
		return c.req.PromptTokens
	case policies.CostOutputTokens:
		return c.maxOutput
	case policies.CostUSD:
		if c.req.UnitMicroUSD > 0 {
			return c.req.UnitMicroUSD // billed per image or character
		}
		// Every token at the dearest rate it may be billed at: the most
		// the call can cost.
		return llm.BoundMicroUSD(c.reach, c.req.PromptTokens, c.maxOutput)
	}
	return 1
}

// watch wraps the response body so its usage is read as it passes.
func (c *llmCall) watch(resp *http.Response) {
	c.status = resp.StatusCode
	if resp.StatusCode >= 400 || c.fixed != nil || c.req.NoUsage {
		// An error before any output: the settlement gives the tokens
		// back. A call at a fixed cost is charged it, and one whose answer
		// says no usage its reservation, whatever the answer says.
		return
	}
	labelled := false
	if ct := resp.Header["Content-Type"]; len(ct) > 0 && isEventStream(ct[0]) {
		labelled = true
	}
	switch {
	case c.kind > llm.AnthropicMessages: // images, audio
		if labelled {
			return // its events are not a text stream's: charged its reservation
		}
	case labelled:
		resp.Body = c.watchStream(resp.Body, false)
		// The watcher may drop the usage chunk or end the stream: the
		// upstream's length no longer holds.
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		return
	default:
		// What is not labelled an event stream may still be one: its
		// first byte tells (see sniffedBody).
		c.sniffed = sniffedBody{call: c, src: resp.Body, length: resp.ContentLength}
		resp.Body = &c.sniffed // in the call: no allocation of its own
		return
	}
	resp.Body = c.watchJSON(resp.Body, resp.ContentLength)
}

// watchStream reads body as the call's event stream. A sized one (its
// length already sent, as when only its bytes told it was a stream) keeps
// the usage chunk the client did not ask for, so that the length holds.
func (c *llmCall) watchStream(body io.ReadCloser, sized bool) io.ReadCloser {
	cfg := llm.StreamConfig{Kind: c.kind, Model: c.req.Model, DropUsageChunk: !c.req.IncludeUsage && !sized,
		AudioBytesPerToken: c.req.Family.AudioBytesPerToken}
	c.meter.configure(&cfg)
	c.stream = llm.NewStreamWatcher(body, cfg)
	return c.stream
}

// watchJSON keeps the first maxUsageBody bytes of body, a JSON answer of
// length bytes (-1 unknown), to read its usage once it passed.
func (c *llmCall) watchJSON(body io.ReadCloser, length int64) io.ReadCloser {
	c.tap = teeBody{ReadCloser: body, max: maxUsageBody} // in the call: no allocation of its own
	c.tapped = &c.tap
	if length > 0 && length <= maxUsageBody {
		c.tapped.buf = make([]byte, 0, length) // one allocation, not one per doubling
	}
	return c.tapped
}

// sniffedBody is an answer not labelled an event stream, read as one or as
// JSON by what it holds: a JSON answer starts with '{' (or '['), an event
// stream with a field, a comment or a blank line. A stream labelled
// text/plain is then metered like any other. Its first read decides.
type sniffedBody struct {
	call   *llmCall
	src    io.ReadCloser
	length int64
	body   io.ReadCloser // once decided
}

func (s *sniffedBody) Read(p []byte) (int, error) {
	if s.body != nil {
		return s.body.Read(p)
	}
	n, err := s.src.Read(p)
	i := 0
	for i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n') {
		i++
	}
	if i == n && err == nil {
		return n, nil // white space alone: it passes, and the next read decides
	}
	if i < n && p[i] != '{' && p[i] != '[' {
		// An event stream: the watcher reads what was read, then the rest.
		// (A body's error is returned again by its next read.)
		s.body = s.call.watchStream(&prefixed{prefix: bytes.Clone(p[:n]), ReadCloser: s.src}, s.length >= 0)
		return s.body.Read(p)
	}
	tee := s.call.watchJSON(s.src, s.length).(*teeBody)
	tee.record(p[:n], err)
	s.body = tee
	return n, err
}

func (s *sniffedBody) Close() error {
	if s.body != nil {
		return s.body.Close()
	}
	return s.src.Close()
}

// prefixed reads prefix, then its ReadCloser.
type prefixed struct {
	prefix []byte
	io.ReadCloser
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.ReadCloser.Read(b)
}

// isEventStream reports whether the media type of the Content-Type ct is
// text/event-stream. Most responses are JSON: a header that does not name
// an event stream in any case is not parsed (parsing builds a map).
func isEventStream(ct string) bool {
	const name = "event-stream"
	for i := 0; i+len(name) <= len(ct); i++ {
		if strings.EqualFold(ct[i:i+len(name)], name) {
			mt, _, _ := mime.ParseMediaType(ct)
			return mt == "text/event-stream"
		}
	}
	return false
}

// settle makes every check hold what the call really cost; it runs once,
// after the response was copied (or failed).
func (c *llmCall) settle(ctx context.Context) error {
	if c.settled || c.res == nil {
		return nil
	}
	c.settled = true
	if c.fixed != nil {
		return c.settleFixed(ctx)
	}
	bounded, delivered := c.actual()
	c.charged, c.chargedUsage = true, bounded
	c.chargedTokens = llm.AddSat(bounded.input, bounded.output)
	c.chargedMicroUSD = c.usd(bounded)
	actual := make([]int64, len(c.costs))
	for i, cost := range c.costs {
		u := bounded
		if c.delivered.of(cost) {
			u = delivered
		}
		input, output := u.input, u.output
		switch cost {
		case policies.CostTokens:
			actual[i] = llm.AddSat(input, output)
		case policies.CostInputTokens:
			actual[i] = input
		case policies.CostOutputTokens:
			actual[i] = output
		case policies.CostUSD:
			actual[i] = c.usd(u)
		default:
			actual[i] = 1
		}
	}
	return c.settleWindows(context.WithoutCancel(ctx), actual)
}

// usd is what usage u of the call costs: its tokens at the model's
// prices, or for a call billed per unit its price, unless it was billed
// nothing.
func (c *llmCall) usd(u usage) int64 {
	if c.req.UnitMicroUSD > 0 {
		if u == (usage{}) {
			return 0
		}
		return c.req.UnitMicroUSD
	}
	if u.reported {
		return c.price.CostMicroUSD(u.bill, c.reach)
	}
	return llm.BoundMicroUSD(c.reach, u.input, u.output)
}

// usage is what a call is charged, in tokens; bill is the provider's
// usage, by kind of token, when reported says it came.
type usage struct {
	input, cached, output int64
	bill                  llm.Usage
	reported              bool
}

// actual is what the call cost in input tokens (cached ones among them) and
// output tokens: the provider's usage when it came (its numbers, negative
// ones as 0), read once for both answers. Without it: nothing for an
// upstream error status or a connection never made (nothing was billed);
// otherwise (a cut stream, a JSON answer cut or unreadable, no answer after
// the request was sent) bounded is the reservation, an upper bound of what
// was billed, and delivered the prompt and the text that reached the
// client.
func (c *llmCall) actual() (bounded, delivered usage) {
	if c.status >= 400 || (c.status == 0 && neverSent(c.upstreamErr)) {
		return usage{}, usage{}
	}
	if c.meter != nil && c.stream != nil && c.stream.Ended() {
		u := c.meter.charge(c.stream)
		return u, u
	}
	var u llm.Usage
	var ok, json bool
	switch {
	case c.stream != nil:
		u, ok = c.stream.Usage()
	case c.tapped != nil && c.tapped.complete():
		u, ok = llm.ParseUsage(c.kind, c.tapped.buf)
		json = ok
	}
	if ok {
		in, out := max(u.Input, 0), max(u.Output, 0)
		if json {
			// What the answer shows counts, whatever its usage says.
			out = max(out, llm.SeenOutput(c.kind, c.req.Model, c.tapped.buf))
		}
		if c.stream != nil {
			// What was seen counts, whatever the usage says: the output
			// that reached the client, and after an error event that
			// followed content, the prompt that made it.
			seen := c.stream.Delivered()
			out = max(out, seen)
			if seen > 0 && c.stream.Failed() {
				in = max(in, c.req.PromptTokens)
			}
		}
		bill := u // priced by kind of token, at what was seen at least
		bill.Input, bill.Output = in, out
		u := usage{input: in, cached: min(max(u.CachedInput, 0), in), output: out, bill: bill, reported: true}
		return u, u
	}
	bounded = usage{input: c.req.PromptTokens, output: c.maxOutput}
	if c.unreadable {
		return bounded, bounded // what it delivered cannot be seen
	}
	var out int64
	if c.stream != nil {
		out = c.stream.Delivered()
	}
	return bounded, usage{input: c.req.PromptTokens, output: out}
}

// neverSent reports whether err ended the exchange before the request could
// reach the upstream (no connection was made); nil, when the call never
// went out at all, is nothing sent too.
func neverSent(err error) bool {
	if err == nil {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

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
