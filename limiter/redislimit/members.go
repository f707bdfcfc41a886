package redislimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// membersKey finds the pipelineCtx in a pipeline's context.
type membersKey struct{}

// pipelineCtx is a shared pipeline's context: its leader's values without
// its cancellation (as context.WithoutCancel, in the same one allocation),
// saying which calls the pipeline carries, so that a hook on the client (a
// tracer's) can tell the requests one round trip served.
type pipelineCtx struct {
	parent context.Context
	batch  []*call
}

func (c *pipelineCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *pipelineCtx) Done() <-chan struct{}       { return nil }
func (c *pipelineCtx) Err() error                  { return nil }

func (c *pipelineCtx) Value(key any) any {
	if key == (membersKey{}) {
		return c
	}
	return c.parent.Value(key)
}

// Members calls f with the context and the commands of each decision that
// the pipeline ctx belongs to (the context a go-redis pipeline hook sees)
// carries: the calls a shared pipeline gathered, or ctx itself, with nil
// commands, when the commands went alone. On a Cluster the pipeline is
// split by node, each part with this context; a hook tells a decision's
// part by its commands. Several decisions' calls may also travel merged
// into one command, which is none of theirs.
func Members(ctx context.Context, f func(ctx context.Context, cmds []redis.Cmder)) {
	pc, ok := ctx.Value(membersKey{}).(*pipelineCtx)
	if !ok {
		f(ctx, nil)
		return
	}
	for _, c := range pc.batch {
		f(c.ctx, c.cmds)
	}
}
