package limiter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// roundTrip decides ops on Redis and leaves each op's reply or error in the
// op. It reports whether the ops were recorded (all admitted) and the error
// of the first failed call, if any.
//
// One GCRA check alone goes through redis_rate's AllowN, one command. Any
// other request is one decideScript call covering all its checks, all or
// nothing, on a standalone server or Sentinel's master. On a Cluster the
// checks of one request live in different slots, which no script can span:
// they are decided one call at a time, shortest period first, stopping at
// the first denial, and what the earlier ones took is refunded. Shortest
// first means a request that a per-second limit denies never reaches the
// hourly quota, so the quota's refunds (and a denial cached while one is in
// flight) only arise on the rarer path where the longer limit denies.
func (r *Redis) roundTrip(ctx context.Context, ops []*sharedOp) (recorded bool, err error) {
	for _, op := range ops {
		op.base = redisBaseKey(op.check.Rule.Name, op.digest)
		if op.check.Rule.Algorithm == SlidingWindow {
			op.member = r.nextMember(op.cost)
		}
	}
	if len(ops) == 1 && ops[0].check.Rule.Algorithm == GCRA {
		return r.allowGCRA(ctx, ops[0])
	}
	if !r.cluster || len(ops) == 1 {
		return r.decideAll(ctx, ops)
	}

	ordered := slices.Clone(ops)
	slices.SortStableFunc(ordered, func(a, b *sharedOp) int {
		return cmp.Compare(a.check.Limit.Period, b.check.Limit.Period)
	})
	var taken []*sharedOp
	for _, op := range ordered {
		ok, err := r.decideAll(ctx, []*sharedOp{op})
		if err != nil || !ok {
			if len(taken) > 0 {
				r.refund(ctx, taken)
				for _, t := range taken {
					t.taken = false
				}
			}
			return false, err
		}
		taken = append(taken, op)
	}
	return true, nil
}

// allowGCRA runs one GCRA check through redis_rate, turning a panic on a
// malformed reply (it asserts the reply's types unchecked) into an error.
func (r *Redis) allowGCRA(ctx context.Context, op *sharedOp) (recorded bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			op.res, recorded, err = nil, false, fmt.Errorf("limiter: redis_rate failed on its reply: %v", p)
		}
	}()
	c := op.check
	res, err := r.gcra.AllowN(ctx, op.base, redis_rate.Limit{
		Rate: int(c.Limit.Rate), Burst: int(c.Limit.Quota()), Period: c.Limit.Period,
	}, int(op.cost))
	if err != nil {
		return false, err
	}
	op.res, op.asked, op.taken = res, true, res.Allowed > 0
	return op.taken, nil
}

// decideAll runs decideScript once for ops, whose keys must share a slot
// unless the server is not a Cluster.
func (r *Redis) decideAll(ctx context.Context, ops []*sharedOp) (recorded bool, err error) {
	keys := make([]string, 0, 2*len(ops))
	args := make([]any, 0, 1+6*len(ops))
	args = append(args, len(ops))
	for _, op := range ops {
		c := op.check
		switch c.Rule.Algorithm {
		case GCRA:
			k := gcraKeyPrefix + op.base
			keys = append(keys, k, k)
		case SlidingWindow:
			keys = append(keys, op.base+slidingLogSuffix, op.base+slidingSumSuffix)
		case FixedWindow:
			k := op.base + fixedSuffix
			keys = append(keys, k, k)
		default:
			return false, fmt.Errorf("limiter: algorithm %q is not shared", c.Rule.Algorithm)
		}
		args = append(args, string(c.Rule.Algorithm), c.Limit.Rate, max(1, c.Limit.Period.Microseconds()),
			c.Limit.Quota(), op.cost, op.member)
	}
	cmd := newEvalCmd(ctx, "evalsha", decideScript.Hash(), keys, args)
	r.exec(ctx, []*redis.Cmd{cmd})
	v, err := cmd.Result()
	if err != nil {
		return false, err
	}
	replies, recorded, err := parseDecideReply(v, len(ops))
	if err != nil {
		return false, err
	}
	for i, op := range ops {
		op.reply, op.asked, op.taken = replies[i], true, recorded
	}
	return recorded, nil
}

// refund gives back what ops took, in one pipeline.
func (r *Redis) refund(ctx context.Context, ops []*sharedOp) {
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
	case GCRA:
		return &refund{gcraRefundScript, []string{gcraKeyPrefix + op.base},
			[]any{c.Limit.Period.Seconds(), c.Limit.Rate, op.cost}}
	case SlidingWindow:
		return &refund{slidingRefundScript,
			[]string{op.base + slidingLogSuffix, op.base + slidingSumSuffix}, []any{op.member, op.cost}}
	case FixedWindow:
		return &refund{fixedRefundScript, []string{op.base + fixedSuffix}, []any{op.reply.extra, op.cost}}
	}
	return nil
}

func (r *Redis) exec(ctx context.Context, cmds []*redis.Cmd) {
	if execScripts(ctx, r.client, r.sources, cmds) {
		r.stats.scriptReloads.Add(1)
	}
}

// newEvalCmd builds EVAL/EVALSHA exactly as go-redis does, including the key
// position a Cluster pipeline routes by.
func newEvalCmd(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// execScripts runs cmds (EVALSHA commands) in one pipeline. Those that fail
// with NOSCRIPT (the script cache is empty after a restart, a failover, a
// SCRIPT FLUSH or on a new Cluster node) run again as EVAL in a second
// pipeline, and their replies are copied into the original commands. It
// reports whether a second pipeline was needed.
func execScripts(ctx context.Context, client RedisScripter, sources map[string]string, cmds []*redis.Cmd) (reloaded bool) {
	if len(cmds) == 0 {
		return false
	}
	pipe := client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, c) // queues only
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error

	var again, evals []*redis.Cmd
	for _, c := range cmds {
		if !isNoScript(c.Err()) {
			continue
		}
		args := c.Args()
		if len(args) < 3 {
			continue
		}
		sha, _ := args[1].(string)
		src, ok := sources[sha]
		if !ok {
			continue
		}
		a := make([]any, len(args))
		copy(a, args)
		a[0], a[1] = "eval", src
		e := redis.NewCmd(ctx, a...)
		e.SetFirstKeyPos(3)
		again, evals = append(again, c), append(evals, e)
	}
	if len(evals) == 0 {
		return false
	}
	pipe = client.Pipeline()
	for _, e := range evals {
		_ = pipe.Process(ctx, e)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range again {
		v, err := evals[i].Result()
		c.SetVal(v)
		c.SetErr(err)
	}
	return true
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
