package redislimit

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// recorded is what Redis recorded for one admitted Decide: the shared part
// of the request's limiter.Reservation, which it implements as a
// limiter.Settler. mu serializes its adjustments.
type recorded struct {
	r   *Limiter
	mu  sync.Mutex
	ops []*sharedOp  // recorded by Redis
	one [1]*sharedOp // ops' first backing array: most requests hold one

	// What a request of one check needs on its way through Decide once it
	// is asked, in this one allocation (each was one of its own): its
	// decision, its op, the ops asked, its script call and the context
	// saying its deadline.
	ds    [1]limiter.Decision
	op    sharedOp
	asked [1]*sharedOp
	call  callBuf
	dl    deadlineCtx
	// lent says call and dl are in use: a second round trip of the
	// request (on a Cluster, one per master) builds its own.
	callLent, dlLent bool
}

// callBuf holds one decideScript call of one check: its arguments
// (decideCmdIn needs 12 at most) and the slice exec takes.
type callBuf struct {
	args [12]any
	cmds [1]redis.Cmder
}

// buffer lends h's call buffer once, then returns nil.
func (h *recorded) buffer() *callBuf {
	if h == nil || h.callLent {
		return nil
	}
	h.callLent = true
	return &h.call
}

// withDeadline is withDeadline in h's deadlineCtx, the first time.
func (h *recorded) withDeadline(ctx context.Context, dl time.Time) context.Context {
	if h.dlLent {
		return withDeadline(ctx, dl)
	}
	if cur, ok := ctx.Deadline(); ok && cur.Before(dl) {
		return ctx
	}
	h.dlLent = true
	h.dl = deadlineCtx{Context: ctx, dl: dl}
	return &h.dl
}

var _ limiter.Settler = (*recorded)(nil)

// settler returns h as the request's limiter.Settler, or nil when Redis
// recorded nothing.
func (h *recorded) settler() limiter.Settler {
	if len(h.ops) == 0 {
		return nil
	}
	return h
}

// Settle implements limiter.Settler: units is indexed like the checks Decide
// was given. It goes in one pipeline bounded by lateAllowance, detached from
// ctx's cancellation: a client that hung up must not leave its tokens
// taken.
func (h *recorded) Settle(ctx context.Context, units []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.r.adjust(ctx, h.ops, func(op *sharedOp) int64 {
		if op.index < len(units) {
			return max(units[op.index], 0)
		}
		return op.cost
	})
}

// adjustment is one script call that moves what a check holds.
type adjustment struct {
	op     *sharedOp
	units  int64 // what op holds once it ran
	script *redis.Script
	keys   []string
	args   []any
}

// adjustment returns the call that makes op hold units, or nil when there is
// nothing to move.
func (op *sharedOp) adjustment(units int64) *adjustment {
	delta := units - op.cost
	if !op.taken || delta == 0 {
		return nil
	}
	alg := algorithmOf(op.check.Rule.Algorithm)
	if alg == nil {
		return nil
	}
	a := &adjustment{op: op, units: units}
	if a.script, a.keys, a.args = alg.settle(op, units, delta); a.script == nil {
		return nil
	}
	return a
}

// adjust makes each op hold units(op), in one pipeline.
func (r *Limiter) adjust(ctx context.Context, ops []*sharedOp, units func(*sharedOp) int64) {
	var as []*adjustment
	for _, op := range ops {
		if a := op.adjustment(units(op)); a != nil {
			as = append(as, a)
		}
	}
	if len(as) == 0 {
		return
	}
	// An adjustment moves by a delta, so it is never retried: after an
	// ambiguous timeout a retry could give back twice. It has the late
	// reply's allowance instead: a loaded instance reads Redis's replies
	// late, and one lost here leaves what the request took counted.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lateAllowance())
	defer cancel()
	cmds := make([]redis.Cmder, len(as))
	for i, a := range as {
		cmds[i] = newEvalCmd(ctx, "evalsha", a.script.Hash(), a.keys, a.args)
	}
	r.exec(ctx, cmds)
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			r.stats.refundErrors.Add(1)
			if n, ok := r.errLog.allow(r.clock()); ok {
				r.log.Warn("redis limiter: adjusting a reservation failed", "error", err, "suppressed", n)
			}
			continue
		}
		r.stats.refunds.Add(1)
		if as[i].units < as[i].op.cost {
			r.denials.forget(as[i].op.denialKey())
		}
		as[i].op.cost = as[i].units
		if as[i].units == 0 {
			as[i].op.taken = false
		}
	}
}

// member is the sliding-window log entry of op at cost: "<id>:<cost>".
func (op *sharedOp) member(cost int64) string {
	return op.memberID + ":" + strconv.FormatInt(cost, 10)
}
