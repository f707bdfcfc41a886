package redislimit

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPipelines is how many shared pipelines may be in flight at once
// when Config.Pipelines is zero (see coalescer for when more than one).
const DefaultPipelines = 4

// maxBatch bounds the calls one pipeline carries.
const maxBatch = 128

// gatherAt is the average batch from which a call waits for the pipeline
// in flight rather than start another (see coalescer). Measured with wrk on
// loopback: below it (light load, 4 connections) waiting costs a round
// trip for a batch of one or two; above it (64 connections) it halves
// Redis's CPU a decision.
const gatherAt = 3

// nodeGatherAt is gatherAt for the gatherer of one Cluster master: each
// master sees its share of the decisions, so batches there are that much
// smaller at the same load, and what a call costs Redis falls with the
// batch (one script run and one clock read per batch). Waiting for the
// pipeline in flight as soon as two calls share one keeps a master's
// batches, and its CPU a decision, near a standalone server's.
const nodeGatherAt = 2

// coalescer gathers the script calls of concurrent decisions into shared
// pipelines (group commit). A call that may start a pipeline (below) sends
// at once, taking along whatever calls are queued; any other joins the
// queue, and the next pipeline to finish hands the queue to one of its
// calls to send. Idle, a call goes out alone and at once:
// nothing ever waits for a batch to fill, so one round trip serves many
// decisions exactly when many are waiting.
//
// How many pipelines fly at once follows the load. While the recent
// pipelines carried few calls, a call that finds fewer than max in flight
// starts another: it would gain nothing by waiting a round trip. Once they
// carry gatherAt or more on average, a call waits for the one in flight,
// so that one full pipeline a round trip serves them all (fewer, fuller
// pipelines cost both sides less CPU a decision); another starts only when
// a full batch is waiting, so that a far Redis does not hold an instance
// to maxBatch decisions a round trip.
//
// It starts no goroutine: a pipeline is sent by one of the calling
// goroutines. A queued call does not leave when its context ends (it may be
// the one chosen to send the next batch); it waits at most for the
// pipelines ahead of it, each bounded by its members' deadlines.
type coalescer struct {
	exec func(ctx context.Context, cmds []redis.Cmder)
	// merge, when set, may replace a batch's commands by fewer that do the
	// same (several script calls as one); split then puts the replies back
	// into the original commands, or again names those to send unmerged.
	merge func(cmds []redis.Cmder) (merged []redis.Cmder, split func(), again func() []redis.Cmder)
	max   int
	// gatherAt is the average batch from which calls wait (gatherAt or
	// nodeGatherAt).
	gatherAt int
	// timeout is the least a pipeline has from when it is sent (zero: no
	// least), so that the time its calls spent waiting for it never counts
	// against Redis.
	timeout time.Duration

	mu      sync.Mutex
	running int
	// avg is how many calls the recent pipelines carried (a moving
	// average, times 16): the load, as the pipelines see it.
	avg   int
	queue []*call
}

// call is one decision's commands, waiting for a pipeline.
type call struct {
	ctx  context.Context
	cmds []redis.Cmder
	// wake receives, once, the batch this call is to send, or nil when
	// another call sent its commands and their replies are in.
	wake chan []*call
}

// calls recycles calls with their channels (three allocations a decision
// otherwise). A call goes back once its do returns: by then it has
// received its one message, and no pipeline holds it any more (a sender
// reads nothing of a call after waking it).
var calls = sync.Pool{New: func() any { return &call{wake: make(chan []*call, 1)} }}

func newCoalescer(max int, timeout time.Duration, exec func(context.Context, []redis.Cmder), merge func([]redis.Cmder) ([]redis.Cmder, func(), func() []redis.Cmder)) *coalescer {
	return &coalescer{exec: exec, merge: merge, max: max, timeout: timeout, gatherAt: gatherAt}
}

// do sends cmds, alone or with other calls', and returns once their
// replies (or errors) are in the commands.
func (co *coalescer) do(ctx context.Context, cmds []redis.Cmder) {
	c := calls.Get().(*call)
	c.ctx, c.cmds = ctx, cmds
	defer func() {
		c.ctx, c.cmds = nil, nil
		calls.Put(c)
	}()
	co.mu.Lock()
	if co.running == 0 || co.running < co.max && (co.avg < 16*co.gatherAt || len(co.queue)+1 >= maxBatch) {
		co.running++
		batch := append(co.take(maxBatch-1), c)
		co.mu.Unlock()
		co.send(c, batch)
		return
	}
	co.queue = append(co.queue, c)
	co.mu.Unlock()
	// One channel, one message a use: the sender never blocks.
	if batch := <-c.wake; batch != nil {
		co.send(c, batch)
	}
}

// take removes up to max queued calls. Called with co.mu held.
func (co *coalescer) take(max int) []*call {
	n := min(len(co.queue), max)
	if n == 0 {
		return nil
	}
	batch := make([]*call, n, n+1)
	copy(batch, co.queue)
	co.queue = append(co.queue[:0], co.queue[n:]...)
	return batch
}

// send runs batch's commands in one pipeline on leader's goroutine, wakes
// the other calls, then hands the queue, if any, to its first call.
func (co *coalescer) send(leader *call, batch []*call) {
	cmds := leader.cmds
	if len(batch) > 1 {
		cmds = make([]redis.Cmder, 0, 2*len(batch))
		for _, c := range batch {
			cmds = append(cmds, c.cmds...)
		}
	}
	// The pipeline outlives no member's wish: it ends at the latest of
	// their deadlines, and a member's context ending does not cut the
	// others' replies. Nor does the wait for a pipeline: it has at least
	// the timeout from now.
	var ctx context.Context = &pipelineCtx{parent: leader.ctx, batch: batch}
	if dl, ok := latestDeadline(batch); ok {
		if least := time.Now().Add(co.timeout); co.timeout > 0 && least.After(dl) {
			dl = least
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	if co.merge != nil && len(batch) > 1 {
		merged, split, again := co.merge(cmds)
		co.exec(ctx, merged)
		split()
		if re := again(); len(re) > 0 {
			co.exec(ctx, re)
		}
	} else {
		co.exec(ctx, cmds)
	}
	for _, c := range batch {
		if c != leader {
			c.wake <- nil
		}
	}
	co.mu.Lock()
	co.avg += (16*len(batch) - co.avg) / 8
	next := co.take(maxBatch)
	if len(next) == 0 {
		co.running--
		co.mu.Unlock()
		return
	}
	co.mu.Unlock()
	next[0].wake <- next
}

// latestDeadline is the latest deadline of the calls; ok is false when one
// of them has none (the pipeline then has none either).
func latestDeadline(batch []*call) (time.Time, bool) {
	var latest time.Time
	for _, c := range batch {
		dl, ok := c.ctx.Deadline()
		if !ok {
			return time.Time{}, false
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return latest, true
}

// deadlineCtx is a context that says a deadline without enforcing it: no
// timer, nothing registered with its parent. Enough where what runs on it
// only reads the deadline, as a coalesced call does (see send).
type deadlineCtx struct {
	context.Context
	dl time.Time
}

// withDeadline is ctx saying the earlier of its own deadline and dl.
func withDeadline(ctx context.Context, dl time.Time) context.Context {
	if cur, ok := ctx.Deadline(); ok && cur.Before(dl) {
		return ctx
	}
	return &deadlineCtx{Context: ctx, dl: dl}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.dl, true }
