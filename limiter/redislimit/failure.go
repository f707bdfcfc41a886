package redislimit

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// suspectWindowFactor sets the suspect window in multiples of the timeout.
const suspectWindowFactor = 3

// outcome is what a round trip's error says about Redis.
type outcome int

const (
	outcomeOK       outcome = iota // Redis answered
	outcomeFailure                 // Redis failed: the failure modes apply
	outcomeOverload                // this instance was too slow, not Redis: deny
	outcomeSuspect                 // a timeout not yet shown to be Redis's: deny what would fail open
)

// classify feeds n's breaker and the counters. Everything here is per node:
// a Cluster master's failures and timeouts open its breaker alone, so its
// keys go to their failure modes and the other masters' keys stay exact.
// Only Redis's own failures count against it. A caller that went away says
// nothing about Redis. A go-redis pool timeout is this instance's queue (the
// slots should make it impossible). A timeout is ambiguous: Redis may be
// hung, or this instance may have been too starved (a flood on two cores)
// to read a reply that was there in time. It is explained when a round trip
// to the same node that started later has succeeded; otherwise it is
// suspect. When round trips started a suspect window apart have both timed
// out with no success in between, the node is asked directly with a
// deadline of breaker_cooldown (see verify), and only its silence opens the
// breaker. Until then a suspect timeout denies instead of failing open, so
// that a flood can never switch a limit off. A Cluster node's error also
// asks for the slot map to be reloaded: a failover is followed as soon as
// the Cluster has promoted a replica.
func (r *Limiter) classify(ctx context.Context, n *node, started time.Time, err error, probe bool, key string) outcome {
	s := started.UnixNano()
	if err == nil {
		for {
			last := n.lastOKStart.Load()
			if s <= last || n.lastOKStart.CompareAndSwap(last, s) {
				break
			}
		}
		if first := n.suspectSince.Load(); first != 0 && s > first {
			n.suspectSince.CompareAndSwap(first, 0)
		}
		if from := n.breaker.success(probe); from != breakerClosed {
			down := time.Duration(r.clock().UnixNano() - n.downAt.Load())
			r.log.Info("redis limiter: redis is back, circuit breaker closed", "node", n.addr, "down_for", down.Round(time.Millisecond))
		}
		n.answered.Store(r.clock().UnixNano())
		return outcomeOK
	}
	r.stats.errors.Add(1)
	n.errors.Add(1)
	if ctx.Err() != nil {
		n.breaker.release(probe)
		return outcomeFailure
	}
	if isTimeout(err) {
		r.stats.timeouts.Add(1)
		n.timeouts.Add(1)
	}
	if errors.Is(err, redis.ErrPoolTimeout) || (isTimeout(err) && n.lastOKStart.Load() > s) {
		n.breaker.release(probe)
		return outcomeOverload
	}
	r.followCluster()
	if redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "TRYAGAIN") {
		// The node answered: the Cluster as a whole refuses (a slot has no
		// master yet, with cluster-require-full-coverage yes) or a slot is
		// moving. The failure modes answer this request; the breaker, which
		// would keep answering without the node after the Cluster is whole
		// again, is not fed.
		n.breaker.release(probe)
		n.answered.Store(r.clock().UnixNano())
		return outcomeFailure
	}
	if isTimeout(err) && probe {
		r.settleProbe(n, key)
		return outcomeSuspect
	}
	if isTimeout(err) {
		first := n.suspectSince.Load()
		if first == 0 {
			n.suspectSince.CompareAndSwap(0, s)
		} else if s >= first+int64(r.suspectWindow) {
			r.verify(n, key)
		}
		return outcomeSuspect
	}
	if n.breaker.failure(probe) {
		n.downAt.Store(r.clock().UnixNano())
		r.log.Warn("redis limiter: circuit breaker opened, failure modes apply",
			"node", n.addr, "error", err, "cooldown", r.cooldown)
		return outcomeFailure
	}
	if m, ok := r.errLog.allow(r.clock()); ok {
		r.log.Warn("redis limiter: round trip failed", "node", n.addr, "error", err, "suppressed", m)
	}
	return outcomeFailure
}

// verify asks n, in the background so that no request waits for it and at
// most once at a time per node, whether it answers a cheap command on key
// within breaker_cooldown: a deadline no starved-but-alive instance misses.
// An answer (any reply, a redirection too) means the timeouts were this
// instance's own and clears them; no answer opens n's breaker. The
// goroutine is Close's to wait for.
func (r *Limiter) verify(n *node, key string) {
	if !n.verifying.CompareAndSwap(false, true) {
		return
	}
	if !r.goBackground(func() {
		defer n.verifying.Store(false)
		release, err := r.slots.acquire(context.Background(), r.cooldown)
		if err != nil {
			return // every slot busy all along: this says nothing about Redis
		}
		err = r.askExists(n, key)
		release()
		if isReply(err) {
			n.answered.Store(r.clock().UnixNano())
			n.suspectSince.Store(0)
			return
		}
		if n.breaker.trip() {
			n.downAt.Store(r.clock().UnixNano())
			r.log.Warn("redis limiter: redis did not answer within the timeout nor within breaker_cooldown; "+
				"circuit breaker opened, failure modes apply", "node", n.addr, "error", err, "cooldown", r.cooldown)
		}
	}) {
		n.verifying.Store(false)
	}
}

// settleProbe decides n's half-open breaker after its probe timed out. A
// probe's timeout is as ambiguous as any other: right after Redis comes
// back the probe dials and handshakes again while the flood answered by the
// failure modes competes for the CPU, and on a starved instance it times
// out against a healthy Redis; reopening then would keep the limit off for
// another cooldown. So n is asked directly within breaker_cooldown, as
// verify does, with the breaker left half-open (every other call still
// fails fast): an answer closes it, silence reopens it. The goroutine is
// Close's to wait for.
func (r *Limiter) settleProbe(n *node, key string) {
	if r.goBackground(func() {
		release, err := r.slots.acquire(context.Background(), r.cooldown)
		if err != nil {
			n.breaker.release(true) // says nothing about Redis: the next caller probes
			return
		}
		err = r.askExists(n, key)
		release()
		if isReply(err) {
			n.answered.Store(r.clock().UnixNano())
			n.suspectSince.Store(0)
			if from := n.breaker.success(true); from != breakerClosed {
				down := time.Duration(r.clock().UnixNano() - n.downAt.Load())
				r.log.Info("redis limiter: redis is back, circuit breaker closed", "node", n.addr, "down_for", down.Round(time.Millisecond))
			}
			return
		}
		n.breaker.failure(true)
	}) {
		return
	}
	n.breaker.failure(true)
}

// askExists asks n a cheap command on key with breaker_cooldown to answer,
// counted from when it is sent: the wait for a slot before it (a flood
// holds them all) is this instance's queue, not Redis's silence, and must
// not eat into the deadline that decides whether Redis is there.
func (r *Limiter) askExists(n *node, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cooldown)
	defer cancel()
	return n.cl().Exists(ctx, key).Err()
}

// goBackground runs f on a goroutine Close waits for, unless Close has
// begun; it reports whether f runs.
func (r *Limiter) goBackground(f func()) bool {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// degrade applies op's failure mode: FailLocal is fallback's to decide (the
// Engine's in-process share), the others are answered here.
func (r *Limiter) degrade(op *sharedOp, fallback limiter.Fallback) limiter.Decision {
	c := op.check
	d := limiter.Decision{Policy: c.Rule.Name, Limit: c.Limit}
	switch c.Rule.OnRedisError {
	case limiter.FailLocal:
		if fallback != nil {
			r.stats.localFallbacks.Add(1)
			return fallback(op.index)
		}
		fallthrough // nothing to fall back to: fail closed
	case limiter.FailDeny:
		r.stats.failedClosed.Add(1)
		d.Reason = limiter.ReasonUnavailable
		d.RetryAfter = r.cooldown
		return d
	default: // FailAllow and the zero value
		r.stats.failedOpen.Add(1)
		// Nothing is known to be consumed; reporting the full quota keeps a
		// failed-open check from looking like the most restrictive one.
		d.Allowed = true
		d.Reason = limiter.ReasonFailedOpen
		d.Remaining = c.Limit.Quota()
		return d
	}
}
