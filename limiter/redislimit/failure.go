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

// classify feeds the breaker and the counters. Only Redis's own failures
// count against it. A caller that went away says nothing about Redis. A
// go-redis pool timeout is this instance's queue (the slots should make it
// impossible). A timeout is ambiguous: Redis may be hung, or this instance
// may have been too starved (a flood on two cores) to read a reply that was
// there in time. It is explained when a round trip that started later has
// succeeded; otherwise it is suspect. When round trips started a suspect
// window apart have both timed out with no success in between, Redis is
// asked directly with a deadline of breaker_cooldown (see verify), and only
// its silence opens the breaker. Until then a suspect timeout denies instead
// of failing open, so that a flood can never switch a limit off.
func (r *Limiter) classify(ctx context.Context, started time.Time, err error, probe bool, key string) outcome {
	s := started.UnixNano()
	if err == nil {
		for {
			last := r.lastOKStart.Load()
			if s <= last || r.lastOKStart.CompareAndSwap(last, s) {
				break
			}
		}
		if first := r.suspectSince.Load(); first != 0 && s > first {
			r.suspectSince.CompareAndSwap(first, 0)
		}
		if from := r.breaker.success(probe); from != breakerClosed {
			down := time.Duration(r.clock().UnixNano() - r.downAt.Load())
			r.log.Info("redis limiter: redis is back, circuit breaker closed", "down_for", down.Round(time.Millisecond))
		}
		return outcomeOK
	}
	r.stats.errors.Add(1)
	if ctx.Err() != nil {
		r.breaker.release(probe)
		return outcomeFailure
	}
	if isTimeout(err) {
		r.stats.timeouts.Add(1)
	}
	if errors.Is(err, redis.ErrPoolTimeout) || (isTimeout(err) && r.lastOKStart.Load() > s) {
		r.breaker.release(probe)
		return outcomeOverload
	}
	if isTimeout(err) && !probe {
		first := r.suspectSince.Load()
		if first == 0 {
			r.suspectSince.CompareAndSwap(0, s)
		} else if s >= first+int64(r.suspectWindow) {
			r.verify(key)
		}
		return outcomeSuspect
	}
	if r.breaker.failure(probe) {
		r.downAt.Store(r.clock().UnixNano())
		r.log.Warn("redis limiter: circuit breaker opened, failure modes apply",
			"error", err, "cooldown", r.cooldown)
		return outcomeFailure
	}
	if n, ok := r.errLog.allow(r.clock()); ok {
		r.log.Warn("redis limiter: round trip failed", "error", err, "suppressed", n)
	}
	return outcomeFailure
}

// verify asks Redis, in the background so that no request waits for it and
// at most once at a time, whether it answers a cheap command on key's node
// within breaker_cooldown: a deadline no starved-but-alive instance misses.
// An answer means the timeouts were this instance's own and clears them; no
// answer opens the breaker. The goroutine is Close's to wait for.
func (r *Limiter) verify(key string) {
	if !r.verifying.CompareAndSwap(false, true) {
		return
	}
	r.closeMu.Lock()
	if r.closed {
		r.closeMu.Unlock()
		r.verifying.Store(false)
		return
	}
	r.wg.Add(1)
	r.closeMu.Unlock()
	go func() {
		defer r.wg.Done()
		defer r.verifying.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), r.cooldown)
		defer cancel()
		release, err := r.slots.acquire(ctx, r.cooldown)
		if err != nil {
			return // every slot busy all along: this says nothing about Redis
		}
		err = r.client.Exists(ctx, key).Err()
		release()
		if err == nil {
			r.suspectSince.Store(0)
			return
		}
		if r.breaker.trip() {
			r.downAt.Store(r.clock().UnixNano())
			r.log.Warn("redis limiter: redis did not answer within the timeout nor within breaker_cooldown; "+
				"circuit breaker opened, failure modes apply", "error", err, "cooldown", r.cooldown)
		}
	}()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// degrade applies c's failure mode.
func (r *Limiter) degrade(now time.Time, op *sharedOp, u *held) limiter.Decision {
	c := op.check
	d := limiter.Decision{Policy: c.Rule.Name, Limit: c.Limit}
	switch c.Rule.OnRedisError {
	case limiter.FailDeny:
		r.stats.failedClosed.Add(1)
		d.Reason = limiter.ReasonUnavailable
		d.RetryAfter = r.cooldown
		return d
	case limiter.FailLocal:
		r.stats.localFallbacks.Add(1)
		lim := fallbackLimit(c)
		ld, hold := r.local.Reserve(now, limiter.BucketGroup{Policy: c.Rule.Name, Limit: lim, Fallback: true, Algorithm: c.Rule.Algorithm}, c.Key, c.Units())
		ld.Policy = c.Rule.Name
		if ld.Reason == limiter.ReasonNone || ld.Reason == limiter.ReasonLimited {
			ld.Reason = limiter.ReasonLocalFallback
		}
		if hold != nil {
			u.locals = append(u.locals, localHold{index: op.index, hold: hold})
		}
		return ld
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

// fallbackLimit is the share of c's limit one instance enforces alone:
// rate and quota scaled by LocalShare (zero means 1), at least 1 each.
func fallbackLimit(c limiter.Check) limiter.Limit {
	share := c.Rule.LocalShare
	if share <= 0 {
		share = 1
	}
	// The epsilon keeps 100 * 0.29 (28.999999999999996) at 29.
	scale := func(n int64) int64 { return max(1, int64(float64(n)*share+1e-9)) }
	return limiter.Limit{Rate: scale(c.Limit.Rate), Period: c.Limit.Period, Burst: scale(c.Limit.Quota())}
}
