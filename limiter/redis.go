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
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// RedisScripter is the part of a go-redis client that Redis uses: scripts,
// pipelines, the DEL redis_rate may call and the EXISTS that checks whether
// Redis answers at all. *redis.Client (standalone or
// Sentinel failover) and *redis.ClusterClient implement it.
type RedisScripter interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	Pipeline() redis.Pipeliner
}

// Defaults of RedisConfig.
const (
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = 500 * time.Millisecond
	DefaultQueueTimeout    = 250 * time.Millisecond
)

// DefaultMaxInFlight is go-redis's default pool size: 10 connections per CPU.
var DefaultMaxInFlight = 10 * runtime.GOMAXPROCS(0)

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
	// MaxInFlight caps the round trips in flight at once; decisions beyond
	// it wait for a slot. Set it to the client's pool size so that no
	// decision ever waits inside go-redis, where the wait would eat into
	// the Redis deadline; zero means DefaultMaxInFlight.
	MaxInFlight int
	// QueueTimeout bounds the wait for a slot; a decision still waiting then
	// is denied (ReasonOverloaded). Zero means DefaultQueueTimeout.
	QueueTimeout time.Duration
	// Local holds the in-process buckets of the "local" failure mode (in
	// groups marked Fallback); nil means private buckets with the default
	// cap. Pass the Engine's so one Retain call covers both.
	Local *Local
}

// Redis is the Shared backend: GCRA (redis_rate), sliding-window log and
// fixed window, all timed by Redis's clock, with every check of a request in
// one pipeline, refunds when the request is denied, per-policy failure modes,
// a circuit breaker and a denial cache.
//
// Create it with NewRedis; it starts nothing. A decision may leave one
// bounded background check running (see verify): call Close before closing
// the client. Redis is safe for concurrent use.
type Redis struct {
	client  RedisScripter
	gcra    *redis_rate.Limiter
	sources map[string]string // script SHA1 -> source, for the NOSCRIPT fallback

	timeout      time.Duration
	queueTimeout time.Duration
	cooldown     time.Duration
	cluster      bool // checks of one request may live on different nodes
	slots        slots
	clock        func() time.Time
	log          *slog.Logger
	local        *Local
	breaker      *breaker
	denials      *denialCache

	memberPrefix string // makes sliding-window members unique across instances
	seq          atomic.Uint64

	stats       redisCounters
	errLog      logThrottle
	downAt      atomic.Int64 // Unix ns when the breaker last opened, for the recovery log
	lastOKStart atomic.Int64 // Unix ns at which the latest successful round trip started
	// suspectSince is when the oldest timed-out round trip that no later
	// success explains started (Unix ns; 0: none). See classify.
	suspectSince  atomic.Int64
	suspectWindow time.Duration
	verifying     atomic.Bool // a verify goroutine is running

	closeMu sync.Mutex // guards closed against wg.Add after Close
	closed  bool
	wg      sync.WaitGroup
}

var _ Backend = (*Redis)(nil)

// NewRedis returns a Redis deciding through client, which must not be nil.
func NewRedis(client RedisScripter, cfg RedisConfig) (*Redis, error) {
	if client == nil {
		return nil, errors.New("creating redis limiter: nil client")
	}
	if cfg.Timeout < 0 || cfg.BreakerCooldown < 0 || cfg.BreakerFailures < 0 || cfg.DenialCacheSize < 0 ||
		cfg.MaxInFlight < 0 || cfg.QueueTimeout < 0 {
		return nil, errors.New("creating redis limiter: negative setting")
	}
	r := &Redis{
		client:       client,
		gcra:         redis_rate.NewLimiter(client),
		timeout:      cmp.Or(cfg.Timeout, DefaultRedisTimeout),
		queueTimeout: cmp.Or(cfg.QueueTimeout, DefaultQueueTimeout),
		// Two unanswered waves of round trips this far apart are not one
		// stall of this process: it would have to last twice the timeout.
		suspectWindow: suspectWindowFactor * cmp.Or(cfg.Timeout, DefaultRedisTimeout),
		slots:         newSlots(cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)),
		cooldown:      cmp.Or(cfg.BreakerCooldown, DefaultBreakerCooldown),
		clock:         cfg.Clock,
		log:           cfg.Logger,
		local:         cfg.Local,
		denials:       newDenialCache(cfg.DenialCacheSize),
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	_, r.cluster = client.(*redis.ClusterClient)
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

	r.sources = map[string]string{}
	for _, s := range []struct {
		script *redis.Script
		src    string
	}{
		{decideScript, decideSrc}, {gcraRefundScript, gcraRefundSrc},
		{slidingRefundScript, slidingRefundSrc}, {fixedRefundScript, fixedRefundSrc},
	} {
		r.sources[s.script.Hash()] = s.src
	}
	return r, nil
}

// sharedOp is one check on its way through DecideShared.
type sharedOp struct {
	index  int // of the check in DecideShared's argument
	check  Check
	cost   int64
	digest keyDigest
	base   string             // rl:{policy:digest}
	member string             // sliding window only
	res    *redis_rate.Result // a lone GCRA check, decided by redis_rate
	reply  scriptReply        // any other check, decided by decideScript
	asked  bool               // Redis answered for this check
	taken  bool               // Redis recorded it: a refund must give it back
}

// suspectWindowFactor sets the suspect window in multiples of the timeout.
const suspectWindowFactor = 3

// overloadRetry is the Retry-After of a decision the instance could not make
// in time because too many were waiting for Redis.
const overloadRetry = time.Second

// Decide implements Shared. Checks that cannot pass whatever Redis
// says (rate zero, cost above the quota) and keys in the denial cache deny
// the request before anything is sent. Otherwise the checks go to Redis
// together and are recorded all or nothing (see roundTrip): a denied request
// consumes nothing, and undo is nil. An admitted request's undo gives back
// everything it took. A check of a local algorithm (token_bucket), which the
// Engine never sends here, is decided by the local buckets at its full limit.
//
// A decision waits for one of a bounded number of round-trip slots before
// its Redis deadline starts: waiting is the instance's own backpressure, not
// a Redis failure. Past the queue timeout it is denied (ReasonOverloaded),
// never let through unchecked.
func (r *Redis) Decide(ctx context.Context, checks []Check) ([]Decision, func(context.Context)) {
	now := r.clock()
	ds := make([]Decision, len(checks))
	for i, c := range checks {
		ds[i] = Decision{Policy: policyName(c), Limit: c.Limit, Reason: ReasonNotAsked}
	}
	ops := make([]*sharedOp, 0, len(checks))
	local := make([]bool, len(checks))
	for i, c := range checks {
		if c.Rule == nil {
			ds[i].Reason = ReasonUnavailable // cannot be decided; the Engine rejects it earlier
			return ds, nil
		}
		if d, denied := c.StaticDenial(); denied {
			ds[i] = d
			return ds, nil
		}
		if !c.Rule.Algorithm.Shared() {
			local[i] = true
			continue
		}
		op := &sharedOp{index: i, check: c, cost: c.Units(), digest: digestKey(c.Key)}
		if den, at, hit := r.denials.lookup(op.denialKey(), op.cost, r.clock); hit {
			r.stats.denialHits.Add(1)
			ds[i].Reason = ReasonDenialCached
			ds[i].RetryAfter = time.Duration(den.until - at.UnixNano())
			ds[i].ResetAfter = max(ds[i].RetryAfter, time.Duration(den.resetAt-at.UnixNano()))
			return ds, nil
		}
		ops = append(ops, op)
	}

	u := undo{r: r}
	for i, c := range checks {
		if !local[i] {
			continue
		}
		d, f := r.local.Reserve(now, BucketGroup{Policy: c.Rule.Name, Limit: c.Limit}, c.Key, c.Units())
		ds[i] = d
		if !d.Allowed {
			u.giveBackLocal()
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
		return finish(ds, &u)
	}
	release, err := r.slots.acquire(ctx, r.queueTimeout)
	if err != nil {
		r.breaker.release(probe)
		r.stats.overloaded.Add(1)
		for _, op := range ops {
			ds[op.index] = overloaded(op.check)
		}
		u.giveBackLocal()
		return ds, nil
	}
	started := r.clock()
	timeout := r.timeout
	if probe {
		// The probe may have to dial and handshake again, and a flood
		// answered by the failure modes meanwhile competes for the CPU: a
		// probe that times out keeps the limit off for another cooldown.
		timeout = max(timeout, r.cooldown/2)
	}
	rtCtx, cancel := context.WithTimeout(ctx, timeout)
	_, rtErr := r.roundTrip(rtCtx, ops)
	cancel()
	release()
	r.stats.roundTrips.Add(1)

	switch r.classify(ctx, started, rtErr, probe, ops[0].base) {
	case outcomeOverload:
		r.stats.overloaded.Add(1)
		for _, op := range ops {
			ds[op.index] = overloaded(op.check)
		}
		u.giveBackLocal()
		return ds, nil
	case outcomeSuspect:
		for _, op := range ops {
			if op.check.Rule.OnRedisError == FailDeny || op.check.Rule.OnRedisError == FailLocal {
				ds[op.index] = r.degrade(now, op.check, &u)
			} else {
				r.stats.overloaded.Add(1)
				ds[op.index] = overloaded(op.check)
			}
		}
		return finish(ds, &u)
	case outcomeFailure:
		for _, op := range ops {
			ds[op.index] = r.degrade(now, op.check, &u)
		}
		return finish(ds, &u)
	}

	now = r.clock() // Redis answered now: the denial lasts from here
	for _, op := range ops {
		if !op.asked {
			continue // on a Cluster, after an earlier check denied: not asked
		}
		d := r.decision(op)
		ds[op.index] = d
		if op.taken {
			u.ops = append(u.ops, op)
		}
		if !d.Allowed && d.RetryAfter > 0 {
			r.denials.put(op.denialKey(), op.cost, now, now.Add(d.RetryAfter), now.Add(max(d.ResetAfter, d.RetryAfter)))
		}
	}
	return finish(ds, &u)
}

// finish returns the decisions of a request, giving back what its admitted
// checks took when another one denied it.
func finish(ds []Decision, u *undo) ([]Decision, func(context.Context)) {
	for _, d := range ds {
		if !d.Allowed && d.Reason != ReasonNotAsked {
			u.giveBackLocal()
			return ds, nil
		}
	}
	return ds, u.fn()
}

// overloaded is the decision for a check that could not be asked in time.
func overloaded(c Check) Decision {
	return Decision{Policy: c.Rule.Name, Limit: c.Limit, Reason: ReasonOverloaded, RetryAfter: overloadRetry}
}

func policyName(c Check) string {
	if c.Rule == nil {
		return ""
	}
	return c.Rule.Name
}

func (op *sharedOp) denialKey() denialKey {
	return denialKey{policy: op.check.Rule.Name, limit: op.check.Limit, key: op.digest}
}

// decision turns a Redis answer into a Decision. A check that Redis would
// have admitted but did not record (another check of the request denied)
// shows what it still has, its cost not taken.
func (r *Redis) decision(op *sharedOp) Decision {
	c := op.check
	d := Decision{Policy: c.Rule.Name, Limit: c.Limit}
	if op.res != nil {
		d.Allowed = op.res.Allowed > 0
		d.ResetAfter = max(0, op.res.ResetAfter)
		d.Remaining = gcraRemaining(c.Limit, d.ResetAfter)
		if !d.Allowed {
			d.Reason = ReasonLimited
			d.RetryAfter = max(0, op.res.RetryAfter)
		}
		return d
	}
	rep := op.reply
	d.Allowed, d.Remaining, d.ResetAfter = rep.allowed, rep.remaining, rep.resetAfter
	if c.Rule.Algorithm == GCRA {
		d.Remaining = gcraRemaining(c.Limit, d.ResetAfter)
	}
	switch {
	case !d.Allowed:
		d.Reason = ReasonLimited
		d.RetryAfter = rep.retryAfter
	case !op.taken:
		d.Remaining = min(d.Remaining+op.cost, c.Limit.Quota())
	}
	return d
}

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
func (r *Redis) classify(ctx context.Context, started time.Time, err error, probe bool, key string) outcome {
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
func (r *Redis) verify(key string) {
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

// Close waits for the background check that verify may have started. The
// client stays the caller's to close, after Close. Decisions after Close
// still work; they start no goroutine.
func (r *Redis) Close() error {
	r.closeMu.Lock()
	r.closed = true
	r.closeMu.Unlock()
	r.wg.Wait()
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// degrade applies c's failure mode.
func (r *Redis) degrade(now time.Time, c Check, u *undo) Decision {
	d := Decision{Policy: c.Rule.Name, Limit: c.Limit}
	switch c.Rule.OnRedisError {
	case FailDeny:
		r.stats.failedClosed.Add(1)
		d.Reason = ReasonUnavailable
		d.RetryAfter = r.cooldown
		return d
	case FailLocal:
		r.stats.localFallbacks.Add(1)
		lim := fallbackLimit(c)
		ld, undoLocal := r.local.Reserve(now, BucketGroup{Policy: c.Rule.Name, Limit: lim, Fallback: true}, c.Key, c.Units())
		ld.Policy = c.Rule.Name
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
		d.Remaining = c.Limit.Quota()
		return d
	}
}

// fallbackLimit is the share of c's limit one instance enforces alone:
// rate and quota scaled by LocalShare (zero means 1), at least 1 each.
func fallbackLimit(c Check) Limit {
	share := c.Rule.LocalShare
	if share <= 0 {
		share = 1
	}
	// The epsilon keeps 100 * 0.29 (28.999999999999996) at 29.
	scale := func(n int64) int64 { return max(1, int64(float64(n)*share+1e-9)) }
	return Limit{Rate: scale(c.Limit.Rate), Period: c.Limit.Period, Burst: scale(c.Limit.Quota())}
}

// refund is one script call that gives back what a check took.
type refund struct {
	script *redis.Script
	keys   []string
	args   []any
}

// undo collects what one DecideShared admitted.
type undo struct {
	r      *Redis
	ops    []*sharedOp // recorded by Redis
	locals []func()
}

// giveBackLocal returns what local buckets gave; Redis recorded nothing.
func (u *undo) giveBackLocal() {
	for _, f := range u.locals {
		f()
	}
	u.locals = nil
}

func (u *undo) fn() func(context.Context) {
	if len(u.ops) == 0 && len(u.locals) == 0 {
		return nil
	}
	var once sync.Once
	return func(ctx context.Context) {
		once.Do(func() {
			u.giveBackLocal()
			u.r.refund(ctx, u.ops)
		})
	}
}

// runRefunds gives Redis back what fs describe, in one pipeline bounded by
// the timeout. It detaches from ctx's cancellation because a client that
// hung up must not leave its tokens taken.
func (r *Redis) runRefunds(ctx context.Context, fs []refund) {
	if len(fs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(fs))
	for i, f := range fs {
		cmds[i] = newEvalCmd(ctx, "evalsha", f.script.Hash(), f.keys, f.args)
	}
	r.exec(ctx, cmds)
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
	left := math.Floor(float64(l.Quota()) - used + 1e-3)
	return int64(min(max(0, left), float64(l.Quota())))
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
