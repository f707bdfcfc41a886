package redislimit

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// callCounter is a go-redis hook on a real client that counts what reaches
// the wire: pipelines and single commands.
type callCounter struct {
	pipelines, commands, pipelinedCmds atomic.Int64
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.commands.Add(1)
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		c.pipelinedCmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (c *callCounter) reset() {
	c.pipelines.Store(0)
	c.commands.Store(0)
	c.pipelinedCmds.Store(0)
}

// All shared checks of one request go to Redis as one script call, all or
// nothing; after Redis lost its scripts, a second pipeline re-sends it as
// EVAL.
func TestOneRoundTripPerRequest(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	counter := &callCounter{}
	c.AddHook(counter)
	r := newTestRedis(t, c, Config{})
	lim := limiter.Limit{Rate: 100, Period: time.Minute}
	checks := []limiter.Check{
		{Rule: policy("g1", limiter.GCRA), Limit: lim, Key: "k"},
		{Rule: policy("g2", limiter.GCRA), Limit: lim, Key: "k", Cost: 3},
		{Rule: policy("sw", limiter.SlidingWindow), Limit: lim, Key: "k"},
		{Rule: policy("fw", limiter.FixedWindow), Limit: lim, Key: "k"},
	}

	tests := []struct {
		name          string
		flush         bool
		wantPipelines int64
		wantCmds      int64
	}{
		{"cold script cache", true, 2, 2},
		{"warm script cache", false, 1, 1},
		{"after SCRIPT FLUSH", true, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.flush {
				if err := c.ScriptFlush(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			counter.reset()
			ds, _ := decide(t, r, checks...)
			for i, d := range ds {
				if !d.Allowed || d.Reason != limiter.ReasonNone {
					t.Fatalf("check %d: got allowed=%v reason=%d, want admitted by redis", i, d.Allowed, d.Reason)
				}
			}
			if got := counter.pipelines.Load(); got != tt.wantPipelines {
				t.Fatalf("pipelines: got %d, want %d", got, tt.wantPipelines)
			}
			if got := counter.pipelinedCmds.Load(); got != tt.wantCmds {
				t.Fatalf("pipelined commands: got %d, want %d", got, tt.wantCmds)
			}
			if got := counter.commands.Load(); got != 0 {
				t.Fatalf("single commands: got %d, want 0", got)
			}
		})
	}
	if got := r.Stats().ScriptReloads; got != 2 {
		t.Fatalf("script reloads: got %d, want 2", got)
	}

	// The refund pipeline also survives a flushed script cache.
	if err := c.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	_, undo := decide(t, r, checks...)
	undo(context.Background())
	if st := r.Stats(); st.RefundErrors != 0 || st.Refunds != 4 {
		t.Fatalf("refunds after flush: got %d ok, %d failed, want 4 ok", st.Refunds, st.RefundErrors)
	}
}

func TestSingleGCRACheckAfterScriptFlush(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	chk := limiter.Check{Rule: policy("g", limiter.GCRA), Limit: limiter.Limit{Rate: 2, Period: time.Minute}, Key: "k"}
	for i, want := range []bool{true, true, false} {
		if err := c.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if d := decideOne(t, r, chk); d.Allowed != want || (!want && d.Reason != limiter.ReasonLimited) {
			t.Fatalf("call %d: got allowed=%v reason=%d, want allowed=%v", i+1, d.Allowed, d.Reason, want)
		}
	}
}

// A round trip whose Redis never answers returns within the timeout and
// leaves no goroutine behind.
func TestRoundTripRespectsDeadline(t *testing.T) {
	// A listener that accepts and never answers: the Redis protocol stalls.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- conn
		}
	}()
	defer func() {
		ln.Close()
		for conn := range accepted {
			conn.Close()
		}
	}()
	opts := goleak.IgnoreCurrent()

	const timeout = 50 * time.Millisecond
	c := newTestClient(t, timeout, ln.Addr().String())
	r := newTestRedis(t, c, Config{Timeout: timeout})
	lim := limiter.Limit{Rate: 10, Period: time.Second}
	checks := []limiter.Check{
		{Rule: &limiter.Rule{Name: "g1", Algorithm: limiter.GCRA, OnRedisError: limiter.FailDeny}, Limit: lim, Key: "k"},
		{Rule: &limiter.Rule{Name: "g2", Algorithm: limiter.GCRA, OnRedisError: limiter.FailDeny}, Limit: lim, Key: "k"},
		{Rule: &limiter.Rule{Name: "sw", Algorithm: limiter.SlidingWindow, OnRedisError: limiter.FailDeny}, Limit: lim, Key: "k"},
	}
	start := time.Now()
	ds, undo := decide(t, r, checks...)
	elapsed := time.Since(start)
	if undo != nil {
		t.Fatal("got an undo, want none: nothing was admitted")
	}
	for i, d := range ds {
		if d.Allowed || d.Reason != limiter.ReasonUnavailable {
			t.Fatalf("check %d: got allowed=%v reason=%d, want ReasonUnavailable", i, d.Allowed, d.Reason)
		}
	}
	if elapsed > timeout+40*time.Millisecond {
		t.Fatalf("decision took %s, want at most the %s timeout plus slack", elapsed, timeout)
	}
	t.Logf("stalled redis, 3 checks in one call: decided in %s (timeout %s)", elapsed.Round(time.Microsecond), timeout)
	c.Close()
	goleak.VerifyNone(t, opts)
}
