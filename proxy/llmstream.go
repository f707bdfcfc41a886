package proxy

import (
	"context"
	"errors"
	"math"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// Under enforce: stream a streamed call reserves its prompt and one window
// of output; as the output passes, each further window is taken from the
// call's token policies (one all-or-nothing Reserve), and when one cannot be
// the stream is ended the way its API ends a stream cut at its output
// limit. A stream the gateway ended is charged its prompt and its whole
// output cap: the provider may finish a generation its client left (the one
// assumption of docs/llm.md), and the cap it was sent bounds that; any
// other end settles as on every llm route (docs/llm-streaming.md).

// streamMeter takes an enforced stream's output a window at a time. It
// belongs to the goroutine copying the response; settle reads it after.
type streamMeter struct {
	ctx     context.Context
	lim     reserver
	call    *llmCall
	window  int64
	first   int64 // the output reserved with the call
	granted int64 // the output reserved so far, first window included
	windows []meterWindow
}

// meterWindow is one window taken after the call was admitted.
type meterWindow struct {
	res   *limiter.Reservation
	idx   []int   // the call's checks it took from
	units []int64 // what it took from each
}

// enforceStream makes a streamed call on an enforce: stream route reserve
// one window of output instead of its cap, and meter the rest as it flows.
// Without a limiter that can reserve (explain) the call reserves as it
// would, and a window past the first is never granted.
func (c *llmCall) enforceStream(ctx context.Context, route *policies.Route, lim reserver) {
	if route.StreamWindow <= 0 || !c.req.Stream || c.kind == llm.Embeddings {
		return
	}
	c.meter = &streamMeter{
		ctx: ctx, lim: lim, call: c, window: route.StreamWindow,
		first: min(c.maxOutput, route.StreamWindow),
	}
	c.meter.granted = c.meter.first
}

// costFor is what the call reserves from a policy of each cost: under
// enforce: stream, its output is one window.
func (c *llmCall) costFor() func(policies.Cost) int64 {
	if c.meter == nil {
		return c.reserve
	}
	return func(cost policies.Cost) int64 {
		// reserve prices c.maxOutput; for the reservation alone it is the
		// first window, and the cap stays what the upstream is held to.
		capped := c.maxOutput
		c.maxOutput = c.meter.first
		defer func() { c.maxOutput = capped }()
		return c.reserve(cost)
	}
}

// configure hands the stream's watcher its meter; a nil m leaves it plain.
func (m *streamMeter) configure(cfg *llm.StreamConfig) {
	if m == nil {
		return
	}
	cfg.Meter, cfg.Granted, cfg.PromptTokens = m, m.granted, m.call.req.PromptTokens
}

// Extend implements llm.Meter: it takes as many windows as bring the grant
// to total, all at once, from every token policy the call reserved from.
func (m *streamMeter) Extend(total int64) (int64, bool) {
	need := total - m.granted
	if need <= 0 {
		return m.granted, true
	}
	n := need/m.window + 1
	if need%m.window == 0 {
		n--
	}
	if n > math.MaxInt64/m.window {
		return m.granted, false
	}
	amount := n * m.window
	var held []limiter.Check // none when the route has no policy
	if m.call.res != nil {
		held = m.call.res.Checks()
	}
	var w meterWindow
	var take []limiter.Check
	for i, ch := range held {
		if i >= len(m.call.costs) || ch.Rule.Shadow {
			continue
		}
		units := m.call.windowCost(m.call.costs[i], amount)
		if units <= 0 {
			continue
		}
		ch.Cost = units
		take = append(take, ch)
		w.idx, w.units = append(w.idx, i), append(w.units, units)
	}
	if len(take) > 0 {
		if m.lim == nil {
			return m.granted, false
		}
		v, res, err := m.lim.Reserve(m.ctx, take)
		if err != nil || !v.Allowed || res == nil {
			return m.granted, false
		}
		w.res = res
		m.windows = append(m.windows, w)
	}
	m.granted += amount
	return m.granted, true
}

// windowCost is what amount output tokens take from a policy of cost.
func (c *llmCall) windowCost(cost policies.Cost, amount int64) int64 {
	switch cost {
	case policies.CostTokens, policies.CostOutputTokens:
		return amount
	case policies.CostUSD:
		return min(llm.OutputMicroUSD(c.reach, amount), math.MaxInt64/2)
	}
	return 0
}

// charge is what a stream the gateway ended cost: its prompt and its whole
// output cap, since the provider may finish the generation after the
// gateway closed it (and a reasoning model spent output that never passed);
// at least what it took windows for, should the output have passed the cap.
func (m *streamMeter) charge(stream *llm.StreamWatcher) usage {
	output := max(m.granted, stream.Metered(), m.call.maxOutput)
	return usage{input: m.call.req.PromptTokens, output: output}
}

// settleWindows settles a call that took windows after its admission: each
// window holds its share of the real cost, the reservation the rest (past
// the limit if need be).
func (c *llmCall) settleWindows(ctx context.Context, actual []int64) error {
	if c.meter == nil || len(c.meter.windows) == 0 {
		return c.res.Settle(ctx, actual)
	}
	rest := append([]int64(nil), actual...)
	var errs []error
	for _, w := range c.meter.windows {
		units := make([]int64, len(w.idx))
		for j, i := range w.idx {
			units[j] = max(min(rest[i], w.units[j]), 0)
			rest[i] -= units[j]
		}
		errs = append(errs, w.res.Settle(ctx, units))
	}
	errs = append(errs, c.res.Settle(ctx, rest))
	return errors.Join(errs...)
}
