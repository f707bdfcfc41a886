package tracing

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Members calls f with the context and the commands of each decision that
// the round trip of ctx carries (the Redis backend's Members, which cmd
// hands in): a shared pipeline carries many decisions. Nil means a round
// trip is its own context's alone.
type Members func(ctx context.Context, f func(ctx context.Context, cmds []redis.Cmder))

// Instrument adds RedisHook to client: on each node of a Cluster (as nodes
// appear), else on the client, whose node is its address or, under
// Sentinel, sentinelMaster.
func Instrument(client redis.UniversalClient, tp trace.TracerProvider, sentinelMaster string, members Members) {
	switch c := client.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(newRedisHook(tp, n.Options().Addr, members)) })
	case *redis.Client:
		node := c.Options().Addr
		if sentinelMaster != "" {
			node = sentinelMaster
		}
		c.AddHook(newRedisHook(tp, node, members))
	}
}

// RedisHook is a go-redis hook that gives each round trip that carries a
// recorded decision a span of its own, named for node. One pipeline carries
// the decisions of many requests (see Members), so its span is
// no request's child: it is a root that links to the span of every decision
// it carries (the proxy's wait on the decision), and each of those spans
// gets a link back and the node's address. A round trip that carries no
// recorded decision costs one context lookup per decision.
func RedisHook(tp trace.TracerProvider, node string, members Members) redis.Hook {
	return newRedisHook(tp, node, members)
}

func newRedisHook(tp trace.TracerProvider, node string, members Members) *redisHook {
	if members == nil {
		members = func(ctx context.Context, f func(context.Context, []redis.Cmder)) { f(ctx, nil) }
	}
	h := &redisHook{
		tracer:  tp.Tracer("github.com/ratelimit-gateway/gateway/tracing"),
		node:    attribute.String("server.address", node),
		members: members,
	}
	if host, port, err := net.SplitHostPort(node); err == nil {
		h.node = attribute.String("server.address", host)
		h.port = attribute.String("server.port", port)
	}
	return h
}

type redisHook struct {
	tracer  trace.Tracer
	members Members
	node    attribute.KeyValue
	port    attribute.KeyValue
}

func (h *redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if within(ctx) {
			return next(ctx, cmd)
		}
		members, own := h.recordedMembers(ctx, []redis.Cmder{cmd})
		if len(members) == 0 {
			return next(ctx, cmd)
		}
		// A command of no decision's own (the CLUSTER SLOTS a lookup of
		// the decision's node needed) is linked but names no node for it.
		ctx, span := h.start(ctx, "redis "+cmd.Name(), 1, members, own)
		err := next(ctx, cmd)
		end(span, err)
		return err
	}
}

func (h *redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if within(ctx) {
			return next(ctx, cmds)
		}
		members, _ := h.recordedMembers(ctx, cmds)
		if len(members) == 0 {
			return next(ctx, cmds)
		}
		ctx, span := h.start(ctx, "redis pipeline", len(cmds), members, true)
		err := next(ctx, cmds)
		for _, c := range cmds {
			if e := c.Err(); e != nil && err == nil && e != redis.Nil {
				err = e
			}
		}
		end(span, err)
		return err
	}
}

// start begins the round trip's span, linked both ways to the recorded
// decisions it carries; when it carries their commands (node), it names the
// node on their spans too.
func (h *redisHook) start(ctx context.Context, name string, cmds int, members []trace.Span, node bool) (context.Context, trace.Span) {
	links := make([]trace.Link, len(members))
	for i, m := range members {
		links[i] = trace.Link{SpanContext: m.SpanContext()}
	}
	attrs := []attribute.KeyValue{
		attribute.String("db.system.name", "redis"), h.node,
		attribute.Int("db.operation.batch.size", cmds),
		attribute.Int("gateway.redis.decisions", len(members)),
	}
	if h.port.Valid() {
		attrs = append(attrs, h.port)
	}
	ctx = context.WithValue(ctx, withinKey{}, true)
	ctx, span := h.tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	back := trace.Link{SpanContext: span.SpanContext()}
	for _, m := range members {
		m.AddLink(back)
		if !node {
			continue
		}
		m.SetAttributes(h.node)
		if h.port.Valid() {
			m.SetAttributes(h.port)
		}
	}
	return ctx, span
}

// withinKey marks the context of a traced round trip: what go-redis runs
// inside it (a connection's HELLO, a redirection) is part of it, not a
// round trip of its own.
type withinKey struct{}

func within(ctx context.Context) bool { return ctx.Value(withinKey{}) != nil }

func end(span trace.Span, err error) {
	if err != nil && err != redis.Nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// recordedMembers returns the recording spans of the decisions the round
// trip of cmds carries: those whose commands are among cmds (a Cluster
// node's part of a pipeline split by node), or, when none is, all of the
// pipeline's (their calls travel merged into one script call, or again
// after a redirection, as commands that are none of theirs); ofTheirs says
// which.
func (h *redisHook) recordedMembers(ctx context.Context, cmds []redis.Cmder) (spans []trace.Span, ofTheirs bool) {
	var own, all []trace.Span
	h.members(ctx, func(m context.Context, mine []redis.Cmder) {
		span := trace.SpanFromContext(m)
		if !span.IsRecording() {
			return
		}
		all = append(all, span)
		if mine == nil || carries(cmds, mine) { // nil: the commands went alone, in the decision's context
			own = append(own, span)
		}
	})
	if len(own) == 0 {
		return all, false
	}
	return own, true
}

func carries(cmds []redis.Cmder, mine []redis.Cmder) bool {
	for _, c := range cmds {
		for _, m := range mine {
			if c == redis.Cmder(m) {
				return true
			}
		}
	}
	return false
}
