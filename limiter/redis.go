package limiter

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// RedisScripter is the part of a go-redis client that Redis uses: scripts,
// pipelines and the DEL redis_rate may call. *redis.Client (standalone or
// Sentinel failover) and *redis.ClusterClient implement it.
type RedisScripter interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Pipeline() redis.Pipeliner
}

// Defaults of RedisConfig.
const (
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = 500 * time.Millisecond
)

// RedisConfig tunes Redis. The zero value is usable: every field has a
// default.
type RedisConfig struct {
	// Timeout bounds one decision's round trip, NOSCRIPT reload included;
	// zero means DefaultRedisTimeout. Past it the checks' failure modes apply.
	Timeout time.Duration
	// BreakerFailures is how many consecutive failed round trips open the
	// circuit breaker; zero means DefaultBreakerFailures.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker answers without Redis
	// before one request probes it; zero means DefaultBreakerCooldown.
	BreakerCooldown time.Duration
	// DenialCacheSize caps the keys remembered as denied; zero means
	// DefaultDenialCacheSize.
	DenialCacheSize int
	// Clock is the gateway clock used for the denial cache and the breaker
	// (limits themselves use Redis time); nil means time.Now.
	Clock func() time.Time
	// Logger receives state changes and throttled errors; nil means
	// slog.Default().
	Logger *slog.Logger
	// Local holds the in-process buckets of the "local" failure mode (under
	// FallbackPolicyName names); nil means private buckets with the default
	// cap. Pass the Engine's so one Retain call covers both.
	Local *Local
}

// Redis is the Shared backend: GCRA (redis_rate), sliding-window log and
// fixed window, all timed by Redis's clock, with every check of a request in
// one pipeline, refunds when the request is denied, per-policy failure modes,
// a circuit breaker and a denial cache.
//
// Create it with NewRedis; it starts nothing and owns no goroutine between
// calls (the client is the caller's to close). Redis is safe for concurrent
// use.
type Redis struct {
	client  RedisScripter
	gcra    *redis_rate.Limiter
	sources map[string]string // script SHA1 -> source, for the NOSCRIPT fallback

	timeout  time.Duration
	cooldown time.Duration
	clock    func() time.Time
	log      *slog.Logger
	local    *Local
	breaker  *breaker
	denials  *denialCache

	memberPrefix string // makes sliding-window members unique across instances
	seq          atomic.Uint64

	stats  redisCounters
	errLog logThrottle
	downAt atomic.Int64 // Unix ns when the breaker last opened, for the recovery log
}

var _ Shared = (*Redis)(nil)

// NewRedis returns a Redis deciding through client, which must not be nil.
func NewRedis(client RedisScripter, cfg RedisConfig) (*Redis, error) {
	if client == nil {
		return nil, errors.New("creating redis limiter: nil client")
	}
	if cfg.Timeout < 0 || cfg.BreakerCooldown < 0 || cfg.BreakerFailures < 0 || cfg.DenialCacheSize < 0 {
		return nil, errors.New("creating redis limiter: negative setting")
	}
	r := &Redis{
		client:   client,
		gcra:     redis_rate.NewLimiter(client),
		timeout:  cmp.Or(cfg.Timeout, DefaultRedisTimeout),
		cooldown: cmp.Or(cfg.BreakerCooldown, DefaultBreakerCooldown),
		clock:    cfg.Clock,
		log:      cfg.Logger,
		local:    cfg.Local,
		denials:  newDenialCache(cfg.DenialCacheSize),
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.local == nil {
		r.local = NewLocal(0)
	}
	r.breaker = newBreaker(r.clock, cmp.Or(cfg.BreakerFailures, DefaultBreakerFailures), r.cooldown)

	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("creating redis limiter: %w", err)
	}
	r.memberPrefix = hex.EncodeToString(nonce[:])

	gcraSHA, gcraSrc, err := learnGCRAScript()
	if err != nil {
		return nil, fmt.Errorf("creating redis limiter: %w", err)
	}
	r.sources = map[string]string{gcraSHA: gcraSrc}
	for _, s := range []struct {
		script *redis.Script
		src    string
	}{
		{slidingWindowScript, slidingWindowSrc}, {slidingRefundScript, slidingRefundSrc},
		{fixedWindowScript, fixedWindowSrc}, {fixedRefundScript, fixedRefundSrc},
		{gcraRefundScript, gcraRefundSrc},
	} {
		r.sources[s.script.Hash()] = s.src
	}
	return r, nil
}

// FallbackPolicyName is the name under which the "local" failure mode keeps
// a policy's in-process buckets, apart from any local policy of that name.
// A Local.Retain after a reload should keep these for the policies it keeps.
func FallbackPolicyName(policy string) string { return policy + "#fallback" }

// sharedOp is one check on its way through DecideShared.
type sharedOp struct {
	index  int // of the check in DecideShared's argument
	check  Check
	cost   int64
	digest keyDigest
	base   string     // rl:{policy:digest}
	member string     // sliding window only
	cmd    *redis.Cmd // sliding and fixed window only
	res    *redis_rate.Result
	reply  scriptReply
	err    error
}

// DecideShared implements Shared. Checks that cannot pass whatever Redis
// says (rate zero, cost above the quota) and keys in the denial cache deny
// the request before anything is sent, so a denied request consumes nothing.
// Otherwise all checks go to Redis in one pipeline; undo refunds the checks
// that Redis (or a local fallback bucket) admitted. A check of a local
// algorithm (token_bucket), which the Engine never sends here, is decided by
// the local buckets at its full limit.
func (r *Redis) DecideShared(ctx context.Context, checks []Check) ([]Decision, func(context.Context)) {
	now := r.clock()
	ds := make([]Decision, len(checks))
	for i, c := range checks {
		ds[i] = Decision{Policy: policyName(c), Limit: c.Limit}
	}
	ops := make([]*sharedOp, 0, len(checks))
	local := make([]bool, len(checks))
	for i, c := range checks {
		if c.Policy == nil {
			ds[i].Reason = ReasonUnavailable // cannot be decided; the Engine rejects it earlier
			return ds, nil
		}
		if d, denied := staticDenial(c); denied {
			ds[i] = d
			return ds, nil
		}
		if !c.Policy.Algorithm.Shared() {
			local[i] = true
			continue
		}
		op := &sharedOp{index: i, check: c, cost: c.cost(), digest: digestKey(c.Key)}
		if den, hit := r.denials.get(op.denialKey(), op.cost, now); hit {
			r.stats.denialHits.Add(1)
			ds[i].Reason = ReasonDenialCached
			ds[i].RetryAfter = time.Duration(den.until - now.UnixNano())
			ds[i].ResetAfter = max(ds[i].RetryAfter, time.Duration(den.resetAt-now.UnixNano()))
			return ds, nil
		}
		ops = append(ops, op)
	}

	u := undo{r: r}
	for i, c := range checks {
		if !local[i] {
			continue
		}
		d, f := r.local.reserve(now, c.Policy.Name, c.Limit, c.Key, c.cost())
		ds[i] = d
		if !d.Allowed {
			for _, g := range u.locals {
				g()
			}
			return ds, nil
		}
		if f != nil {
			u.locals = append(u.locals, f)
		}
	}
	if len(ops) == 0 {
		return ds, u.fn()
	}

	ok, probe := r.breaker.allow()
	if !ok {
		r.stats.failFast.Add(1)
		for _, op := range ops {
			ds[op.index] = r.degrade(now, op.check, &u)
		}
		return ds, u.fn()
	}

	r.stats.roundTrips.Add(1)
	r.roundTrip(ctx, ops)
	r.recordOutcome(ctx, ops, probe)

	for _, op := range ops {
		if op.err != nil {
			ds[op.index] = r.degrade(now, op.check, &u)
			continue
		}
		d, rf := r.decision(op)
		ds[op.index] = d
		if rf != nil {
			u.refunds = append(u.refunds, *rf)
		}
		if !d.Allowed && d.RetryAfter > 0 {
			r.denials.put(op.denialKey(), op.cost, now, now.Add(d.RetryAfter), now.Add(max(d.ResetAfter, d.RetryAfter)))
		}
	}
	return ds, u.fn()
}

func policyName(c Check) string {
	if c.Policy == nil {
		return ""
	}
	return c.Policy.Name
}

func (op *sharedOp) denialKey() denialKey {
	return denialKey{policy: op.check.Policy.Name, limit: op.check.Limit, key: op.digest}
}

// quota is the most one request may cost: the burst for GCRA, the Rate per
// Period for the windows (their Burst is ignored).
func quota(c Check) int64 {
	if c.Policy.Algorithm == SlidingWindow || c.Policy.Algorithm == FixedWindow {
		return c.Limit.Rate
	}
	return c.Limit.burst()
}

// staticDenial denies what no Redis state could admit.
func staticDenial(c Check) (Decision, bool) {
	d := Decision{Policy: c.Policy.Name, Limit: c.Limit}
	switch {
	case c.Limit.DenyAll():
		d.Reason = ReasonDenyAll
	case c.cost() > quota(c):
		d.Reason = ReasonCostTooHigh
	default:
		return d, false
	}
	d.RetryAfter = c.Limit.Period
	if d.RetryAfter <= 0 {
		d.RetryAfter = time.Second
	}
	return d, true
}

// decision turns a Redis answer into a Decision and, when admitted, the
// refund that gives it back.
func (r *Redis) decision(op *sharedOp) (Decision, *refund) {
	c := op.check
	d := Decision{Policy: c.Policy.Name, Limit: c.Limit}
	if op.res != nil {
		d.Allowed = op.res.Allowed > 0
		d.ResetAfter = max(0, op.res.ResetAfter)
		d.Remaining = gcraRemaining(c.Limit, d.ResetAfter)
		if !d.Allowed {
			d.Reason = ReasonLimited
			d.RetryAfter = max(0, op.res.RetryAfter)
			return d, nil
		}
		return d, &refund{gcraRefundScript, []string{gcraKeyPrefix + op.base},
			[]any{c.Limit.Period.Seconds(), c.Limit.Rate, op.cost}}
	}
	rep := op.reply
	d.Allowed, d.Remaining, d.ResetAfter = rep.allowed, rep.remaining, rep.resetAfter
	if !d.Allowed {
		d.Reason = ReasonLimited
		d.RetryAfter = rep.retryAfter
		return d, nil
	}
	if c.Policy.Algorithm == SlidingWindow {
		return d, &refund{slidingRefundScript,
			[]string{op.base + slidingLogSuffix, op.base + slidingSumSuffix}, []any{op.member, op.cost}}
	}
	return d, &refund{fixedRefundScript, []string{op.base + fixedSuffix}, []any{rep.extra, op.cost}}
}

// recordOutcome feeds the breaker and the error counters. A round trip that
// failed because the caller's own context ended says nothing about Redis.
func (r *Redis) recordOutcome(ctx context.Context, ops []*sharedOp, probe bool) {
	var err error
	for _, op := range ops {
		if op.err != nil {
			err = op.err
			break
		}
	}
	if err == nil {
		if from := r.breaker.success(); from != breakerClosed {
			down := time.Duration(r.clock().UnixNano() - r.downAt.Load())
			r.log.Info("redis limiter: redis is back, circuit breaker closed", "down_for", down.Round(time.Millisecond))
		}
		return
	}
	r.stats.errors.Add(1)
	if ctx.Err() != nil {
		r.breaker.release(probe)
		return
	}
	if r.breaker.failure(probe) {
		r.downAt.Store(r.clock().UnixNano())
		r.log.Warn("redis limiter: circuit breaker opened, failure modes apply",
			"error", err, "cooldown", r.cooldown)
		return
	}
	if n, ok := r.errLog.allow(r.clock()); ok {
		r.log.Warn("redis limiter: round trip failed", "error", err, "suppressed", n)
	}
}

// degrade applies c's failure mode.
func (r *Redis) degrade(now time.Time, c Check, u *undo) Decision {
	d := Decision{Policy: c.Policy.Name, Limit: c.Limit}
	switch c.Policy.OnRedisError {
	case FailDeny:
		r.stats.failedClosed.Add(1)
		d.Reason = ReasonUnavailable
		d.RetryAfter = r.cooldown
		return d
	case FailLocal:
		r.stats.localFallbacks.Add(1)
		lim := fallbackLimit(c)
		ld, undoLocal := r.local.reserve(now, FallbackPolicyName(c.Policy.Name), lim, c.Key, c.cost())
		ld.Policy = c.Policy.Name
		if ld.Reason == ReasonNone || ld.Reason == ReasonLimited {
			ld.Reason = ReasonLocalFallback
		}
		if undoLocal != nil {
			u.locals = append(u.locals, undoLocal)
		}
		return ld
	default: // FailAllow and the zero value
		r.stats.failedOpen.Add(1)
		// Nothing is known to be consumed; reporting the full quota keeps a
		// failed-open check from looking like the most restrictive one.
		d.Allowed = true
		d.Reason = ReasonFailedOpen
		d.Remaining = quota(c)
		return d
	}
}

// fallbackLimit is the share of c's limit one instance enforces alone:
// rate and quota scaled by LocalShare (zero means 1), at least 1 each.
func fallbackLimit(c Check) Limit {
	share := c.Policy.LocalShare
	if share <= 0 {
		share = 1
	}
	// The epsilon keeps 100 * 0.29 (28.999999999999996) at 29.
	scale := func(n int64) int64 { return max(1, int64(float64(n)*share+1e-9)) }
	return Limit{Rate: scale(c.Limit.Rate), Period: c.Limit.Period, Burst: scale(quota(c))}
}

// refund is one script call that gives back what a check took.
type refund struct {
	script *redis.Script
	keys   []string
	args   []any
}

// undo collects what one DecideShared admitted.
type undo struct {
	r       *Redis
	refunds []refund
	locals  []func()
}

func (u *undo) fn() func(context.Context) {
	if len(u.refunds) == 0 && len(u.locals) == 0 {
		return nil
	}
	var once sync.Once
	return func(ctx context.Context) { once.Do(func() { u.run(ctx) }) }
}

// run gives everything back: local buckets at once, Redis in one pipeline
// bounded by the timeout. It detaches from ctx's cancellation because a
// client that hung up must not leave its tokens taken.
func (u *undo) run(ctx context.Context) {
	for _, f := range u.locals {
		f()
	}
	if len(u.refunds) == 0 {
		return
	}
	r := u.r
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(u.refunds))
	for i, f := range u.refunds {
		cmds[i] = newEvalCmd(ctx, "evalsha", f.script.Hash(), f.keys, f.args)
	}
	if execScripts(ctx, r.client, r.sources, cmds) {
		r.stats.scriptReloads.Add(1)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			r.stats.refundErrors.Add(1)
			if n, ok := r.errLog.allow(r.clock()); ok {
				r.log.Warn("redis limiter: refund failed", "error", err, "suppressed", n)
			}
			continue
		}
		r.stats.refunds.Add(1)
	}
}

// gcraRemaining derives the tokens left from the time until the bucket is
// full again. redis_rate's own Remaining truncates a float computed from
// epoch-sized numbers, so it often says one token less than there is (2 of 3
// reads 1.9999994, reported as 1). Rounding to a thousandth of a token only
// changes what is reported; admission stays the script's decision.
func gcraRemaining(l Limit, resetAfter time.Duration) int64 {
	emission := l.Period.Seconds() / float64(l.Rate)
	used := resetAfter.Seconds() / emission
	left := math.Floor(float64(l.burst()) - used + 1e-3)
	return int64(min(max(0, left), float64(l.burst())))
}

// gcraLimit converts a check's limit for redis_rate.
func gcraLimit(c Check) redis_rate.Limit {
	return redis_rate.Limit{Rate: int(c.Limit.Rate), Burst: int(c.Limit.burst()), Period: c.Limit.Period}
}

// nextMember returns a sliding-window member unique across instances:
// "<instance nonce>-<sequence>:<cost>".
func (r *Redis) nextMember(cost int64) string {
	b := make([]byte, 0, 40)
	b = append(b, r.memberPrefix...)
	b = append(b, '-')
	b = strconv.AppendUint(b, r.seq.Add(1), 36)
	b = append(b, ':')
	b = strconv.AppendInt(b, cost, 10)
	return string(b)
}
