package redislimit

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// refund is one script call that gives back what a check took.
type refund struct {
	script *redis.Script
	keys   []string
	args   []any
}

// undo collects what one Decide admitted.
type undo struct {
	r      *Limiter
	ops    []*sharedOp // recorded by Redis
	locals []func()
}

// giveBackLocal returns what local buckets gave; Redis recorded nothing.
func (u *undo) giveBackLocal() {
	for _, f := range u.locals {
		f()
	}
	u.locals = nil
}

func (u *undo) fn() func(context.Context) {
	if len(u.ops) == 0 && len(u.locals) == 0 {
		return nil
	}
	var once sync.Once
	return func(ctx context.Context) {
		once.Do(func() {
			u.giveBackLocal()
			u.r.refund(ctx, u.ops)
		})
	}
}

// refund gives back what ops took, in one pipeline.
func (r *Limiter) refund(ctx context.Context, ops []*sharedOp) {
	var fs []refund
	for _, op := range ops {
		if f := op.refund(); f != nil {
			fs = append(fs, *f)
		}
	}
	r.runRefunds(ctx, fs)
}

// refund is the script call that gives back what op took; nil when it took
// nothing.
func (op *sharedOp) refund() *refund {
	if !op.taken {
		return nil
	}
	c := op.check
	switch c.Rule.Algorithm {
	case limiter.GCRA:
		return &refund{gcraRefundScript, []string{gcraKeyPrefix + op.base},
			[]any{c.Limit.Period.Seconds(), c.Limit.Rate, op.cost}}
	case limiter.SlidingWindow:
		return &refund{slidingRefundScript,
			[]string{op.base + slidingLogSuffix, op.base + slidingSumSuffix}, []any{op.member, op.cost}}
	case limiter.FixedWindow:
		return &refund{fixedRefundScript, []string{op.base + fixedSuffix}, []any{op.reply.extra, op.cost}}
	}
	return nil
}

// runRefunds gives Redis back what fs describe, in one pipeline bounded by
// the timeout. It detaches from ctx's cancellation because a client that
// hung up must not leave its tokens taken.
func (r *Limiter) runRefunds(ctx context.Context, fs []refund) {
	if len(fs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(fs))
	for i, f := range fs {
		cmds[i] = newEvalCmd(ctx, "evalsha", f.script.Hash(), f.keys, f.args)
	}
	r.exec(ctx, cmds)
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			r.stats.refundErrors.Add(1)
			if n, ok := r.errLog.allow(r.clock()); ok {
				r.log.Warn("redis limiter: refund failed", "error", err, "suppressed", n)
			}
			continue
		}
		r.stats.refunds.Add(1)
	}
}
