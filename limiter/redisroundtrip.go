package limiter

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// roundTrip asks Redis about every op in one pipeline (two when the script
// cache must be refilled), bounded by the timeout, and leaves each op's
// answer or error in the op.
func (r *Redis) roundTrip(parent context.Context, ops []*sharedOp) {
	ctx, cancel := context.WithTimeout(parent, r.timeout)
	defer cancel()

	var gcra []*sharedOp
	var cmds []*redis.Cmd
	for _, op := range ops {
		c := op.check
		op.base = redisBaseKey(c.Policy.Name, op.digest)
		switch c.Policy.Algorithm {
		case GCRA:
			gcra = append(gcra, op)
		case SlidingWindow:
			op.member = r.nextMember(op.cost)
			op.cmd = newEvalCmd(ctx, "evalsha", slidingWindowScript.Hash(),
				[]string{op.base + slidingLogSuffix, op.base + slidingSumSuffix},
				[]any{c.Limit.Rate, max(1, c.Limit.Period.Microseconds()), op.cost, op.member})
			cmds = append(cmds, op.cmd)
		case FixedWindow:
			op.cmd = newEvalCmd(ctx, "evalsha", fixedWindowScript.Hash(),
				[]string{op.base + fixedSuffix},
				[]any{c.Limit.Rate, max(1, c.Limit.Period.Milliseconds()), op.cost})
			cmds = append(cmds, op.cmd)
		default:
			op.err = fmt.Errorf("limiter: algorithm %q is not shared", c.Policy.Algorithm)
		}
	}

	switch {
	case len(gcra) == 1 && len(cmds) == 0:
		// One GCRA check alone is one command: no batch needed.
		op := gcra[0]
		op.res, op.err = allowN(ctx, r.gcra, op)
	case len(gcra) == 0:
		r.exec(ctx, cmds)
	default:
		b := newGCRABatch(len(gcra))
		var wg sync.WaitGroup
		for _, op := range gcra {
			wg.Add(1)
			go func() {
				defer wg.Done()
				caller := &batchCaller{scriptsOnly: scriptsOnly{errNotBatched}, b: b}
				defer caller.finish()
				op.res, op.err = allowN(ctx, redis_rate.NewLimiter(caller), op)
			}()
		}
		calls := b.collect(ctx)
		all := make([]*redis.Cmd, 0, len(calls)+len(cmds))
		for _, c := range calls {
			all = append(all, c.cmd)
		}
		r.exec(ctx, append(all, cmds...))
		b.release(calls)
		wg.Wait() // the goroutines return as soon as their replies are released
	}

	for _, op := range ops {
		if op.cmd == nil {
			continue
		}
		v, err := op.cmd.Result()
		if err == nil {
			op.reply, err = parseScriptReply(v)
		}
		op.err = err
	}
}

func (r *Redis) exec(ctx context.Context, cmds []*redis.Cmd) {
	if execScripts(ctx, r.client, r.sources, cmds) {
		r.stats.scriptReloads.Add(1)
	}
}

// allowN runs redis_rate, turning a panic on a malformed reply (it asserts
// types unchecked) into an error.
func allowN(ctx context.Context, l *redis_rate.Limiter, op *sharedOp) (res *redis_rate.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("limiter: redis_rate failed on its reply: %v", p)
		}
	}()
	return l.AllowN(ctx, op.base, gcraLimit(op.check), int(op.cost))
}

// learnGCRAScript obtains redis_rate's AllowN script, which it does not
// export, by running AllowN against a recorder: EVALSHA answers NOSCRIPT, so
// go-redis falls back to EVAL with the source. Knowing the source lets a
// batch re-run it as EVAL after Redis lost its script cache, in the same
// second pipeline as our own scripts, instead of one extra call per check.
func learnGCRAScript() (sha, src string, err error) {
	rec := &scriptRecorder{scriptsOnly: scriptsOnly{errRecorded}}
	_, _ = redis_rate.NewLimiter(rec).AllowN(context.Background(), "learn", redis_rate.PerSecond(1), 1)
	if rec.sha == "" || rec.src == "" {
		return "", "", errors.New("learning redis_rate's script: it sent no EVALSHA and EVAL")
	}
	sum := sha1.Sum([]byte(rec.src))
	if hex.EncodeToString(sum[:]) != rec.sha {
		return "", "", errors.New("learning redis_rate's script: EVAL source does not match the EVALSHA digest")
	}
	return rec.sha, rec.src, nil
}

var errRecorded = errors.New("limiter: recorded, not executed")

// scriptRecorder is a Redis client that executes nothing and remembers the
// script it was asked to run.
type scriptRecorder struct {
	scriptsOnly
	sha, src string
}

func (s *scriptRecorder) EvalSha(ctx context.Context, sha1 string, _ []string, _ ...any) *redis.Cmd {
	s.sha = sha1
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(redis.ErrNoScript)
	return cmd
}

func (s *scriptRecorder) Eval(ctx context.Context, script string, _ []string, _ ...any) *redis.Cmd {
	s.src = script
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errRecorded)
	return cmd
}
