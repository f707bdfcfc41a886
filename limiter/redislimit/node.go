package redislimit

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxNodes bounds the servers whose health is kept apart (and named in
// metrics). A Cluster names its nodes itself, so the bound is only a guard:
// past it, further servers share one entry.
const maxNodes = 256

// overflowAddr names the entry shared by the servers past maxNodes, and the
// one used while a Cluster's slot map cannot be had at all.
const overflowAddr = "cluster"

// node is one Redis server as this instance sees it: its breaker, how its
// recent round trips went (see classify), and the pipeline gatherer for the
// calls bound to it. On a standalone server or Sentinel there is one node,
// whatever master Sentinel names; on a Cluster one per master, found from
// the slot of each key, so a failover moves a key's calls to the promoted
// replica's node and its closed breaker. Safe for concurrent use.
type node struct {
	addr    string
	client  atomic.Pointer[clientBox] // the server's own client (a Cluster node's), or the limiter's
	breaker *breaker
	co      *coalescer // nil when gathering is off

	downAt      atomic.Int64 // Unix ns when the breaker last opened, for the recovery log
	lastOKStart atomic.Int64 // Unix ns at which the latest successful round trip started
	// suspectSince is when the oldest timed-out round trip that no later
	// success explains started (Unix ns; 0: none). See classify.
	suspectSince atomic.Int64
	verifying    atomic.Bool // a verify goroutine is running
	// answered is when the server last answered anything (Unix ns, gateway
	// clock; 0: never), for readiness and the background check.
	answered atomic.Int64

	errors, timeouts atomic.Uint64
	accessChecked    atomic.Bool // CheckAccess or Run ran the scripts on it
}

// clientBox lets an interface value live in an atomic.Pointer.
type clientBox struct{ c Client }

func (n *node) cl() Client { return n.client.Load().c }

// nodeSet holds the nodes by address. Lookups of known nodes take a read
// lock only.
type nodeSet struct {
	mu   sync.RWMutex
	m    map[string]*node
	make func(addr string) *node
}

// get returns addr's node, made on first use, with c as its client.
func (s *nodeSet) get(addr string, c Client) *node {
	s.mu.RLock()
	n := s.m[addr]
	s.mu.RUnlock()
	if n == nil {
		s.mu.Lock()
		if n = s.m[addr]; n == nil {
			if len(s.m) >= maxNodes {
				addr = overflowAddr
				n = s.m[addr]
			}
			if n == nil {
				n = s.make(addr)
				s.m[addr] = n
			}
		}
		s.mu.Unlock()
	}
	// A Cluster may close a node's client and make another for the same
	// address (go-redis collects clients of nodes that left the slot map):
	// the node follows the one the slot map hands out.
	if box := n.client.Load(); box == nil || box.c != c {
		n.client.Store(&clientBox{c: c})
	}
	return n
}

// all returns the nodes sorted by address.
func (s *nodeSet) all() []*node {
	s.mu.RLock()
	ns := make([]*node, 0, len(s.m))
	for _, n := range s.m {
		ns = append(ns, n)
	}
	s.mu.RUnlock()
	sort.Slice(ns, func(i, j int) bool { return ns[i].addr < ns[j].addr })
	return ns
}

func (r *Limiter) newNode(addr string) *node {
	n := &node{addr: addr, breaker: newBreaker(r.clock, r.breakerFailures, r.cooldown)}
	if r.pipelines >= 0 {
		merge := mergeNodeDecides
		if r.cc == nil {
			merge = func(cmds []redis.Cmder) ([]redis.Cmder, func(), func() []redis.Cmder) {
				m, split := mergeDecides(cmds)
				return m, split, func() []redis.Cmder { return nil }
			}
		}
		n.co = newCoalescer(r.pipelines, r.timeout, func(ctx context.Context, cmds []redis.Cmder) {
			r.execOn(ctx, n, cmds)
		}, merge)
		if r.cc != nil {
			n.co.gatherAt = nodeGatherAt
		}
	}
	return n
}

// nodeOf returns the node that holds key now: the one node of a standalone
// server or Sentinel, the slot's master on a Cluster (no round trip once
// the slot map is loaded).
func (r *Limiter) nodeOf(ctx context.Context, key string) *node {
	if r.cc == nil {
		return r.single
	}
	// The slot map is the client's bookkeeping (loaded on first use), no
	// decision's round trip: hooks see none of the request's values.
	c, err := r.cc.MasterForKey(noValues{ctx}, key)
	if err != nil {
		return r.nodes.get(overflowAddr, r.client)
	}
	return r.nodes.get(c.Options().Addr, c)
}

// noValues is a context's deadline and cancellation without its values.
type noValues struct{ context.Context }

func (noValues) Value(any) any { return nil }

// execOn runs cmds in one pipeline on n. On a Cluster the pipeline goes to
// n's server alone, so that a hung master delays only the calls bound to
// it; calls its slot map had wrong (MOVED, ASK: a failover or a resharding
// seen first by the server) are sent again through the Cluster client,
// which follows the redirection, and the slot map is reloaded.
func (r *Limiter) execOn(ctx context.Context, n *node, cmds []redis.Cmder) {
	r.stats.pipelines.Add(1)
	if execScripts(ctx, n.cl(), r.sources, cmds) {
		r.stats.scriptReloads.Add(1)
	}
	if r.cc == nil {
		return
	}
	var moved []redis.Cmder
	for _, c := range cmds {
		if isRedirect(c.Err()) {
			moved = append(moved, c)
		}
	}
	if len(moved) == 0 {
		return
	}
	r.cc.ReloadState(ctx)
	for _, c := range moved {
		c.SetErr(nil)
	}
	if execScripts(ctx, r.cc, r.sources, moved) {
		r.stats.scriptReloads.Add(1)
	}
}

// isRedirect reports a Cluster's MOVED or ASK reply.
func isRedirect(err error) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// isReply reports whether err is a reply of the server (it answered).
func isReply(err error) bool {
	var re redis.Error
	return err == nil || errors.As(err, &re) && !isTimeout(err)
}

// followCluster asks the Cluster client to reload its slot map soon. go-redis
// reloads it by itself only on MOVED/ASK replies or when it is older than
// its reload interval; a connection error or a timeout leaves the slot
// pointing at a dead master, so every node error calls this (go-redis runs
// at most one reload at a time, 200 ms apart).
func (r *Limiter) followCluster() {
	if r.cc != nil {
		r.cc.ReloadState(context.Background())
	}
}

// execGrouped runs cmds, each on the node of its first key, through the
// node's gatherer when gathering is on: one pipeline per node.
func (r *Limiter) execGrouped(ctx context.Context, cmds []redis.Cmder) {
	if r.cc == nil {
		r.execNode(ctx, r.single, cmds)
		return
	}
	var order []*node
	groups := make(map[*node][]redis.Cmder, 1)
	for _, c := range cmds {
		n := r.nodeOf(ctx, cmdKey(c))
		if _, ok := groups[n]; !ok {
			order = append(order, n)
		}
		groups[n] = append(groups[n], c)
	}
	for _, n := range order {
		r.execNode(ctx, n, groups[n])
	}
}

func (r *Limiter) execNode(ctx context.Context, n *node, cmds []redis.Cmder) {
	if n.co != nil {
		n.co.do(ctx, cmds)
		return
	}
	r.execOn(ctx, n, cmds)
}

// cmdKey is the first key of an EVAL/EVALSHA command, or "".
func cmdKey(c redis.Cmder) string {
	a := c.Args()
	if len(a) <= evalFirstKey {
		return ""
	}
	s, _ := a[evalFirstKey].(string)
	return s
}

// NodeStats is one Redis server's health as this instance sees it.
type NodeStats struct {
	// Addr is the server's address ("cluster" for calls made while a
	// Cluster's slot map could not be loaded).
	Addr string
	// Breaker is "closed", "open" or "half-open".
	Breaker string
	// BreakerOpens, Errors and Timeouts count as Stats' fields of the same
	// names do, for this server alone.
	BreakerOpens, Errors, Timeouts uint64
	// Answered is when the server last answered (zero: never).
	Answered time.Time
}

func (n *node) stats() NodeStats {
	s := NodeStats{
		Addr: n.addr, Breaker: n.breaker.current().String(), BreakerOpens: n.breaker.opens.Load(),
		Errors: n.errors.Load(), Timeouts: n.timeouts.Load(),
	}
	if a := n.answered.Load(); a != 0 {
		s.Answered = time.Unix(0, a)
	}
	return s
}

// singleAddr names the one node of a client that is not a Cluster's.
func singleAddr(c Client) string {
	rc, ok := c.(*redis.Client)
	if !ok {
		return "redis"
	}
	if a := rc.Options().Addr; a != "FailoverClient" { // what go-redis names a Sentinel client
		return a
	}
	return "sentinel"
}
