package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redis_rate's AllowN sends its script and reads the reply in one call, so it
// cannot be handed a pipeline. To keep one round trip per request anyway,
// each GCRA check runs AllowN in its own goroutine against a batchCaller: the
// caller's EVALSHA is queued into the request's batch and blocks until the
// lead (DecideShared's goroutine) has executed the batch together with the
// other checks' scripts and filled the command's reply.

var (
	errBatchClosed = errors.New("limiter: redis batch already executed")
	errBatchReused = errors.New("limiter: redis batch caller used twice")
	errNotBatched  = errors.New("limiter: command not supported in a redis batch")
	errNoReply     = errors.New("limiter: redis command got no reply")
)

// gcraBatch collects the queued commands of one request's GCRA goroutines.
// It is owned by one DecideShared call; mu guards closed and queued.
type gcraBatch struct {
	n       int
	arrived chan struct{} // one token per caller: queued, or finished without queuing
	mu      sync.Mutex
	closed  bool
	queued  []*batchedCall
}

type batchedCall struct {
	cmd  *redis.Cmd
	done chan struct{} // closed by the lead once cmd holds its reply
}

func newGCRABatch(n int) *gcraBatch {
	return &gcraBatch{n: n, arrived: make(chan struct{}, n)}
}

// collect waits until every caller has queued its command (or finished
// without one) or ctx ends, then closes the batch: later callers get an
// error instead of waiting for an execution that will not come.
func (b *gcraBatch) collect(ctx context.Context) []*batchedCall {
wait:
	for got := 0; got < b.n; got++ {
		select {
		case <-b.arrived:
		case <-ctx.Done():
			break wait
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.queued
}

// release hands every queued command's reply to its caller. A GCRA reply of
// an unexpected shape becomes an error here, because redis_rate type-asserts
// the reply without checking.
func (b *gcraBatch) release(calls []*batchedCall) {
	for _, c := range calls {
		if err := checkGCRAReply(c.cmd); err != nil {
			c.cmd.SetErr(err)
		}
		close(c.done)
	}
}

func checkGCRAReply(cmd *redis.Cmd) error {
	v, err := cmd.Result()
	if err != nil {
		return err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 4 {
		if v == nil {
			return errNoReply
		}
		return fmt.Errorf("limiter: unexpected gcra reply %T", v)
	}
	_, ok0 := arr[0].(int64)
	_, ok1 := arr[1].(int64)
	_, ok2 := arr[2].(string)
	_, ok3 := arr[3].(string)
	if !ok0 || !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("limiter: unexpected gcra reply element types %T %T %T %T", arr[0], arr[1], arr[2], arr[3])
	}
	return nil
}

// batchCaller is the Redis client one GCRA goroutine's redis_rate.Limiter
// sees. It is used by that goroutine only.
type batchCaller struct {
	scriptsOnly
	b    *gcraBatch
	used bool
}

// finish tells the lead that the goroutine is done; it counts only when the
// caller never queued (the lead then stops waiting for it).
func (c *batchCaller) finish() {
	if !c.used {
		c.used = true
		c.b.arrived <- struct{}{} // capacity n, one token per caller: never blocks
	}
}

func (c *batchCaller) queue(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	cmd := newEvalCmd(ctx, name, payload, keys, args)
	if c.used {
		cmd.SetErr(errBatchReused)
		return cmd
	}
	c.used = true
	call := &batchedCall{cmd: cmd, done: make(chan struct{})}
	c.b.mu.Lock()
	if c.b.closed {
		c.b.mu.Unlock()
		cmd.SetErr(errBatchClosed)
		return cmd
	}
	c.b.queued = append(c.b.queued, call)
	c.b.mu.Unlock()
	c.b.arrived <- struct{}{}

	select {
	case <-call.done:
		return cmd
	case <-ctx.Done():
		// The lead may still write cmd; hand back a different command so
		// the two never touch the same memory.
		e := redis.NewCmd(ctx)
		e.SetErr(ctx.Err())
		return e
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

func (c *batchCaller) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.queue(ctx, "eval", script, keys, args)
}

func (c *batchCaller) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.queue(ctx, "evalsha", sha1, keys, args)
}

// scriptsOnly answers every call redis_rate's client interface has besides
// Eval and EvalSha with err: the adapters that embed it (the batch caller,
// the script recorder) only ever run AllowN, which needs nothing else.
type scriptsOnly struct{ err error }

func (s scriptsOnly) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return s.cmd(ctx)
}

func (s scriptsOnly) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return s.cmd(ctx)
}

func (s scriptsOnly) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	cmd := redis.NewBoolSliceCmd(ctx)
	cmd.SetErr(s.err)
	return cmd
}

func (s scriptsOnly) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	cmd.SetErr(s.err)
	return cmd
}

func (s scriptsOnly) Del(ctx context.Context, _ ...string) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx)
	cmd.SetErr(s.err)
	return cmd
}

func (s scriptsOnly) cmd(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(s.err)
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
