package redislimit

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// joinWithin bounds how long the background check takes to find a master
// that joined: it lists the masters every discoverEvery; the slack is a
// loaded machine's.
const joinWithin = 3*discoverEvery + 2*time.Second

// Two masters join a running Cluster and take slots (and keys) from the
// others: one whose ACL lets the gateway's user run its scripts, one whose
// ACL does not. The background check runs the gateway's scripts on each
// (the EVAL of the access check reaches the good one before any decision
// does) and logs the refusing one by address; under a flood of 24 clients
// over 30 keys, only the refusing master's keys meet their failure mode,
// its breaker alone opens, and the good master's keys are decided on it
// with exact limits.
func TestClusterMasterThatJoinsIsCheckedAndHealthTracked(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{PartialCoverage: true, NodeTimeout: time.Second})
	allow := func(s *redistest.Server) {
		if _, err := s.Do("ACL", "SETUSER", "gw", "on", ">pw", "~*", "&*", "+@all"); err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", s.Addr(), err)
		}
	}
	for _, s := range c.Servers {
		allow(s)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Username: "gw", Password: "pw",
		MaxRetries: -1, ReadTimeout: nodeTimeout, WriteTimeout: nodeTimeout})
	t.Cleanup(func() { cc.Close() })
	logs := &logCounter{}
	r := newTestRedis(t, cc, Config{Timeout: nodeTimeout, Logger: slog.New(logs)})
	if err := r.CheckAccess(context.Background()); err != nil {
		t.Fatalf("CheckAccess before any master joined: %v", err)
	}
	runHealth(t, r)

	good := c.AddMaster(t, 3000, allow)
	bad := c.AddMaster(t, 3000, func(s *redistest.Server) {
		if _, err := s.Do("ACL", "SETUSER", "gw", "on", ">pw", "~*", "&*", "+@all", "-@scripting"); err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", s.Addr(), err)
		}
	})
	joined := time.Now()

	// The checks reach both new masters before any decision does.
	for redistest.CommandCount(t, good.Addr(), "eval") == 0 || !strings.Contains(logs.text(), bad.Addr()) {
		if time.Since(joined) > joinWithin {
			t.Fatalf("within %s of the join: %d EVALs on the good master (want the access check's), log %q (want the refusing master %s named)",
				joinWithin, redistest.CommandCount(t, good.Addr(), "eval"), logs.text(), bad.Addr())
		}
		time.Sleep(20 * time.Millisecond) // polling the background check on the wall clock
	}
	t.Logf("both new masters checked %s after the join", time.Since(joined).Round(time.Millisecond))
	if log := logs.text(); !strings.Contains(log, "refuses the gateway's scripts") || !strings.Contains(log, "NOPERM") ||
		strings.Contains(log, good.Addr()) {
		t.Errorf("log %q: want the refusal (NOPERM) of %s alone", log, bad.Addr())
	}

	hotKey := hotKeyOn(t, c.Addrs(), good.Addr())
	owners, _ := keyOwners(t, c.Addrs(), hotKey)
	onGood, onBad := 0, 0
	for _, o := range owners {
		onGood += btoi(o == good.Addr())
		onBad += btoi(o == bad.Addr())
	}
	if onGood == 0 || onBad == 0 {
		t.Fatalf("the new masters hold %d and %d of the %d keys; the test needs some on each", onGood, onBad, nodeKeys)
	}
	evalsBefore := redistest.CommandCount(t, good.Addr(), "evalsha", "eval")
	outs, _ := nodeFlood(t, r, hotKey, 3*time.Second, time.Hour, func() {})
	v := judgeNodes(outs, func(k int) bool { return owners[k] == bad.Addr() }, 0)
	logNodes(t, "masters joined", v, r)
	checkOthers(t, v)
	if v.strayKeys > 0 {
		t.Errorf("%d keys of masters that let the gateway in were denied, want 0", v.strayKeys)
	}
	if v.affectedKeys != onBad {
		t.Errorf("%d keys met their failure mode, want the %d the refusing master holds", v.affectedKeys, onBad)
	}
	for _, o := range outs {
		if o.key >= 0 && owners[o.key] == bad.Addr() && o.reason == limiter.ReasonOverloaded {
			t.Fatalf("a key of the refusing master was answered as overloaded, want its failure mode")
		}
	}
	if got := redistest.CommandCount(t, good.Addr(), "evalsha", "eval") - evalsBefore; got == 0 {
		t.Errorf("no script call reached the good master during the flood, want its keys decided there")
	}
	seen := map[string]NodeStats{}
	for _, n := range r.Stats().Nodes {
		seen[n.Addr] = n
	}
	if n, ok := seen[bad.Addr()]; !ok || n.BreakerOpens == 0 {
		t.Errorf("refusing master %s: stats %+v (present %v), want its own breaker opened", bad.Addr(), n, ok)
	}
	for addr, n := range seen {
		if addr != bad.Addr() && n.BreakerOpens > 0 {
			t.Errorf("node %s's breaker opened %d times, want only the refusing master's", addr, n.BreakerOpens)
		}
	}
	if _, ok := seen[good.Addr()]; !ok {
		t.Errorf("no health kept for the good master %s: nodes %v", good.Addr(), r.Stats().Nodes)
	}
	if b := hotBound(nodeHotLim, v.hotSpan); float64(v.hotAdmitted) > b {
		t.Errorf("hot key on the good master admitted %d over %s, want at most %.0f", v.hotAdmitted, v.hotSpan, b)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
