package redislimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// HealthInterval is how often Run looks at the nodes: it bounds how long a
// Cluster failover goes unnoticed when no request fails on the dead master
// (requests that do fail ask for the reload at once).
const HealthInterval = 250 * time.Millisecond

// idleAfter is how long a node may go without answering before Run asks it
// a PING: a busy node answers requests all the time and is never pinged, an
// idle one costs one PING a second per instance.
const idleAfter = time.Second

// discoverEvery is how often Run lists a Cluster's masters (one CLUSTER
// SLOTS), to check the gateway's rights on masters that joined.
const discoverEvery = 2 * time.Second

// Run keeps the nodes' health current until ctx ends, and returns nil then.
// Every HealthInterval it asks a Cluster client to reload its slot map while
// any master is failing (so that a promoted replica takes over its keys as
// soon as the Cluster has promoted it, whether or not requests are failing
// meanwhile), PINGs nodes that have not answered for a second (what
// readiness reads), and every few seconds lists a Cluster's masters and
// checks the gateway's rights on each new one (see CheckAccess). A Limiter
// without Run still decides, and a failover is still followed on the
// failing requests; Run owns its goroutines and waits for them.
func (r *Limiter) Run(ctx context.Context) error {
	t := time.NewTicker(HealthInterval)
	defer t.Stop()
	var lastDiscover time.Time
	for {
		if r.cc != nil && r.clock().Sub(lastDiscover) >= discoverEvery {
			lastDiscover = r.clock()
			r.discover(ctx)
		}
		r.checkNodes(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// checkNodes is one round of Run.
func (r *Limiter) checkNodes(ctx context.Context) {
	nodes := r.nodes.all()
	now := r.clock().UnixNano()
	var wg sync.WaitGroup
	for _, n := range nodes {
		if r.cc != nil && (n.breaker.current() != breakerClosed || n.suspectSince.Load() != 0) {
			r.followCluster()
		}
		if n.addr == overflowAddr || now-n.answered.Load() < int64(idleAfter) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, r.cooldown)
			defer cancel()
			if err := n.cl().Ping(pctx).Err(); isReply(err) {
				n.answered.Store(r.clock().UnixNano())
			}
		}()
	}
	wg.Wait()
}

// discover lists the Cluster's masters and checks the rights on those not
// seen before. A master that refuses is logged with its address: the keys
// it holds fail in their failure modes.
func (r *Limiter) discover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(r.cooldown, time.Second))
	defer cancel()
	var mu sync.Mutex
	var fresh []*node
	_ = r.cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		n := r.nodes.get(c.Options().Addr, c)
		if n.accessChecked.CompareAndSwap(false, true) {
			mu.Lock()
			fresh = append(fresh, n)
			mu.Unlock()
		}
		return nil
	})
	for _, n := range fresh {
		err := r.checkNodeAccess(ctx, n)
		switch {
		case errors.Is(err, errNoAnswer):
			// Not a verdict: a master that just joined may still be taking
			// its slots (MOVED while they migrate) or be unreachable. It is
			// checked again on the next listing.
			n.accessChecked.Store(false)
		case err != nil:
			r.log.Error("redis limiter: a cluster master refuses the gateway's scripts; its keys fail in their failure modes",
				"node", n.addr, "error", err)
		}
	}
}

// Health is what readiness reads: how many nodes this instance knows and
// which of them are down now (breaker open, or no answer for a while).
type Health struct {
	// Nodes is how many Redis servers this instance has talked to.
	Nodes int
	// Down names the nodes whose breaker is open or that have not answered
	// for three times idleAfter.
	Down []string
	// Answered reports whether any node has answered since start.
	Answered bool
}

// Health reads the nodes' state; it sends nothing. Safe for concurrent use.
func (r *Limiter) Health() Health {
	var h Health
	now := r.clock().UnixNano()
	for _, n := range r.nodes.all() {
		if n.addr == overflowAddr {
			continue
		}
		h.Nodes++
		a := n.answered.Load()
		h.Answered = h.Answered || a != 0
		if n.breaker.current() == breakerOpen || now-a > int64(3*idleAfter) {
			h.Down = append(h.Down, n.addr)
		}
	}
	return h
}

// errNoAnswer says a node did not answer the access check: an outage, for
// the failure modes, not a refusal.
var errNoAnswer = errors.New("no answer")

// CheckAccess runs the gateway's decision script on every master (one on a
// standalone server or Sentinel), on a key that hashes to that master's
// slots, with the client's credentials: EVALSHA, then EVAL when the script
// is not cached, reading and writing a key of each shared algorithm (they
// expire by themselves). It returns an error naming the first node that
// refuses; a node that does not answer within ctx is reported through
// errors.Is(err, ErrNoAnswer) only when no node refused.
func (r *Limiter) CheckAccess(ctx context.Context) error {
	var nodes []*node
	if r.cc == nil {
		nodes = []*node{r.single}
	} else {
		var mu sync.Mutex
		err := r.cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			n := r.nodes.get(c.Options().Addr, c)
			n.accessChecked.Store(true)
			mu.Lock()
			nodes = append(nodes, n)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return fmt.Errorf("listing the cluster's masters: %w: %w", ErrNoAnswer, err)
		}
	}
	var silent error
	for _, n := range nodes {
		err := r.checkNodeAccess(ctx, n)
		switch {
		case err == nil:
		case errors.Is(err, errNoAnswer):
			silent = cmpErr(silent, err)
		default:
			return err
		}
	}
	return silent
}

// ErrNoAnswer wraps CheckAccess's error when a node did not answer.
var ErrNoAnswer = errNoAnswer

// NodeError is what one Redis server did at CheckAccess: refused (a reply
// such as WRONGPASS or NOPERM) or stayed silent (Err wraps ErrNoAnswer).
type NodeError struct {
	Addr string // the server's address ("sentinel" for Sentinel's master)
	Err  error
}

func (e *NodeError) Error() string { return "redis node " + e.Addr + ": " + e.Err.Error() }
func (e *NodeError) Unwrap() error { return e.Err }

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// accessPolicy names the keys CheckAccess writes: rl:{gateway-access-check:…}.
const accessPolicy = "gateway-access-check"

// checkNodeAccess runs the decision script on n as CheckAccess says.
func (r *Limiter) checkNodeAccess(ctx context.Context, n *node) error {
	accessKey := "0"
	base := redisBaseKey(accessPolicy, digestKey(accessKey))
	if r.cc != nil {
		found := false
		for i := 0; i < 1<<20 && !found; i++ {
			accessKey = strconv.Itoa(i)
			base = redisBaseKey(accessPolicy, digestKey(accessKey))
			c, err := r.cc.MasterForKey(ctx, base)
			if err != nil {
				return &NodeError{n.addr, fmt.Errorf("%w: %w", errNoAnswer, err)}
			}
			found = c.Options().Addr == n.addr
		}
		if !found {
			return &NodeError{n.addr, fmt.Errorf("%w: it holds no slot", errNoAnswer)}
		}
	}
	var ops []*sharedOp
	for _, alg := range algorithms {
		ops = append(ops, &sharedOp{
			check: limiter.Check{Rule: &limiter.Rule{Name: accessPolicy, Algorithm: alg.name},
				Limit: limiter.Limit{Rate: 1 << 20, Period: time.Second, Burst: 1 << 20}},
			cost: 1, base: base, memberID: r.nextMemberID(),
		})
	}
	sha, err := decideCmd(ctx, ops, modeRecord)
	if err != nil {
		return err
	}
	// PING first: a refused AUTH or HELLO surfaces as such. Then EVAL (what
	// runs after a restart or a failover emptied the script cache, and
	// caches it) and EVALSHA.
	a := slices.Clone(sha.Args())
	a[0], a[1] = "eval", decideSrc
	eval := redis.NewIntSliceCmd(ctx, a...)
	eval.SetFirstKeyPos(evalFirstKey)
	ping := redis.NewStatusCmd(ctx, "ping")
	pipe := n.cl().Pipeline()
	for _, c := range []redis.Cmder{ping, eval, sha} {
		_ = pipe.Process(ctx, c)
	}
	// The check's keys go at once (they would expire within a second);
	// a user without DEL, which only key resets need, is no reason to stop.
	pipe.Del(ctx, stateKeys(accessPolicy, digestKey(accessKey))...)
	_, perr := pipe.Exec(ctx)
	for _, c := range []redis.Cmder{ping, eval, sha} {
		err := c.Err()
		if sc, ok := c.(*redis.IntSliceCmd); ok && err == nil && sc.Val() == nil {
			err = cmp.Or(perr, errors.New("no reply")) // the pipeline failed before the command was sent
		}
		switch {
		case err == nil:
			if c != ping {
				if _, _, perr := parseDecideReply(c.(*redis.IntSliceCmd).Val(), len(ops)); perr != nil {
					return &NodeError{n.addr, perr}
				}
			}
		case isReply(err) && !transientReply(err):
			return &NodeError{n.addr, err}
		default:
			return &NodeError{n.addr, fmt.Errorf("%w: %w", errNoAnswer, err)}
		}
	}
	n.answered.Store(r.clock().UnixNano())
	return nil
}

// transientReply reports a reply that says the node cannot serve now
// (loading, a Cluster without quorum, a failover under way), not that it
// refuses the gateway.
func transientReply(err error) bool {
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "BUSY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
