package redislimit

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// A master made slow (a proxy it announces holds each of its replies for
// slowBy) under 24 clients over 30 keys: its keys are still decided through
// it, exactly (slowBy is within the deadline: slow is not failed), and the
// other masters' keys do not wait for it: each master has its own
// pipelines, so their decisions' median stays far under slowBy.
func TestClusterSlowMasterDelaysOnlyItsKeys(t *testing.T) {
	const slowBy, slowAt, slowFor = 200 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{PartialCoverage: true, NodeTimeout: time.Second})
	victim := c.Servers[2]
	p := redistest.StartDelayProxy(t, victim.Addr())
	c.AnnounceVia(t, victim, p.Port())
	hotKey := hotKeyOn(t, c.Addrs(), p.Addr())
	owners, _ := keyOwners(t, c.Addrs(), hotKey)
	r := newTestRedis(t, newTestClient(t, time.Second, c.Addrs()...), Config{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	runHealth(t, r)

	outs, _ := nodeFlood(t, r, hotKey, slowAt+slowFor+time.Second, slowAt, func() {
		p.SetDelay(slowBy)
		<-time.After(slowFor) // how long the node stays slow
		p.SetDelay(0)
	})
	onVictim := func(k int) bool { return owners[k] == p.Addr() }
	v := judgeNodes(outs, onVictim, slowAt)
	logNodes(t, "cluster slow master", v, r)
	checkOthers(t, v)
	if v.affectedKeys > 0 {
		t.Errorf("%d keys met a failure mode or were overloaded (%d of them on other masters), want none: the slow master is within the deadline", v.affectedKeys, v.strayKeys)
	}
	var victimLat, otherLat []time.Duration
	for _, o := range outs {
		if o.key < 0 || o.sent < slowAt+slowBy || o.recv > slowAt+slowFor {
			continue // the hot key, and decisions not wholly inside the slow time
		}
		if onVictim(o.key) {
			victimLat = append(victimLat, o.recv-o.sent)
		} else {
			otherLat = append(otherLat, o.recv-o.sent)
		}
	}
	if len(victimLat) == 0 || len(otherLat) == 0 {
		t.Fatalf("%d decisions on the slow master's keys and %d on the others' while it was slow; the test needs both", len(victimLat), len(otherLat))
	}
	slices.Sort(victimLat)
	slices.Sort(otherLat)
	vm, om := victimLat[len(victimLat)/2], otherLat[len(otherLat)/2]
	t.Logf("while slow: the slow master's keys %d decisions, median %s; the others' %d, median %s", len(victimLat), vm, len(otherLat), om)
	if vm < slowBy {
		t.Fatalf("the slow master's keys took a median %s, under the %s it was slowed by: the proxy was not in the way", vm, slowBy)
	}
	if om > slowBy/2 {
		t.Errorf("the other masters' keys took a median %s while one master was slowed by %s, want under %s", om, slowBy, slowBy/2)
	}
	if b := hotBound(nodeHotLim, v.hotSpan); float64(v.hotAdmitted) > b {
		t.Errorf("hot key on the slow master admitted %d over %s, want at most %.0f", v.hotAdmitted, v.hotSpan, b)
	}
}
