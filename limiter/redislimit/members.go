package redislimit

import (
	"context"
	"time"
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

// Members calls f with the context of each decision whose commands travel
// in the pipeline that ctx, the context a go-redis pipeline hook sees,
// belongs to: the calls a shared pipeline gathered, or ctx itself when the
// commands went alone.
func Members(ctx context.Context, f func(context.Context)) {
	pc, ok := ctx.Value(membersKey{}).(*pipelineCtx)
	if !ok {
		f(ctx)
		return
	}
	for _, c := range pc.batch {
		f(c.ctx)
	}
}
