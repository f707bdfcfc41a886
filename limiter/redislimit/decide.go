package redislimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// sharedOp is one check on its way through Decide.
type sharedOp struct {
	index    int // of the check in Decide's argument
	check    limiter.Check
	cost     int64
	digest   keyDigest
	base     string         // rl:{policy:digest}
	key      string         // gcra only: its Redis key, "rate:" and base (base is its tail)
	nums     [numArgs]int64 // rate, period, quota and cost as decideScript gets them (see decideCmdIn)
	memberID string         // sliding window only: the log entry without its cost
	reply    scriptReply    // what decideScript answered for it
	asked    bool           // Redis answered for this check
	taken    bool           // Redis recorded it: a refund must give it back
}

// overloadRetry is the Retry-After of a decision the instance could not make
// in time because too many were waiting for Redis.
const overloadRetry = time.Second

// Decide implements limiter.Backend. Checks that cannot pass whatever Redis
// says (rate zero, cost above the quota) and keys in the denial cache deny
// the request before anything is sent. Otherwise the checks go to Redis
// together and are recorded all or nothing (see roundTrip): a denied request
// consumes nothing, and shared is nil. An admitted request's shared settles
// what Redis recorded (see recorded.Settle). A check Redis cannot answer
// gets its failure mode (see degrade); fallback decides those of FailLocal.
// Every check must be of a shared algorithm: the Engine decides the others.
func (r *Limiter) Decide(ctx context.Context, checks []limiter.Check, fallback limiter.Fallback) ([]limiter.Decision, limiter.Settler) {
	ds, ops, u, denied := r.prepare(checks)
	if denied {
		return ds, nil
	}
	if len(ops) > 0 {
		r.ask(ctx, ops, ds, u, fallback)
	}
	return finish(ds, u)
}

// prepare turns checks into decisions (every one not asked yet) and the ops
// to ask Redis, or denies the request at once: a check that no state could
// admit, or a key the denial cache holds. u is what Redis will have
// recorded; a request of one check (most are) keeps its decision and op
// in it, and one denied at once allocates its decision alone.
func (r *Limiter) prepare(checks []limiter.Check) (ds []limiter.Decision, ops []*sharedOp, u *recorded, denied bool) {
	if len(checks) == 1 {
		d, op := notAsked(checks[0]), sharedOp{}
		if r.precheck(0, checks[0], &d, &op) {
			return []limiter.Decision{d}, nil, nil, true
		}
		u = &recorded{r: r}
		u.ops = u.one[:0]
		u.ds[0], u.op = d, op
		u.asked[0] = &u.op
		return u.ds[:], u.asked[:], u, false
	}
	ds, ops = make([]limiter.Decision, len(checks)), make([]*sharedOp, 0, len(checks))
	for i, c := range checks {
		ds[i] = notAsked(c)
	}
	for i, c := range checks {
		op := new(sharedOp)
		if r.precheck(i, c, &ds[i], op) {
			return ds, nil, nil, true
		}
		ops = append(ops, op)
	}
	u = &recorded{r: r}
	u.ops = u.one[:0]
	return ds, ops, u, false
}

func notAsked(c limiter.Check) limiter.Decision {
	return limiter.Decision{Policy: policyName(c), Limit: c.Limit, Reason: limiter.ReasonNotAsked}
}

// precheck fills op for check i, c, and reports whether c denies the
// request before Redis is asked (see prepare), with its decision in d.
func (r *Limiter) precheck(i int, c limiter.Check, d *limiter.Decision, op *sharedOp) (denied bool) {
	if c.Rule == nil || !c.Rule.Algorithm.Shared() {
		d.Reason = limiter.ReasonUnavailable // cannot be decided here; the Engine never sends it
		return true
	}
	if sd, static := c.StaticDenial(); static {
		*d = sd
		return true
	}
	*op = sharedOp{index: i, check: c, cost: c.Units(), digest: digestKey(c.Key)}
	if den, at, hit := r.denials.lookup(op.denialKey(), op.cost, r.clock); hit {
		r.stats.denialHits.Add(1)
		d.Reason = limiter.ReasonDenialCached
		d.RetryAfter = max(0, time.Duration(den.until-at.UnixNano()))
		d.ResetAfter = max(d.RetryAfter, time.Duration(den.resetAt-at.UnixNano()))
		return true
	}
	return false
}

// ask decides ops on Redis and writes their decisions into ds. A decision
// first waits for one of a bounded number of round-trip slots, and only then
// does its Redis deadline start: waiting is the instance's own backpressure,
// not a Redis failure. Past the queue timeout it is denied
// (ReasonOverloaded), never let through unchecked. What Redis's silence
// means is classify's business.
func (r *Limiter) ask(ctx context.Context, ops []*sharedOp, ds []limiter.Decision, u *recorded, fallback limiter.Fallback) {
	for _, op := range ops {
		alg := algorithmOf(op.check.Rule.Algorithm) // not nil: precheck saw it shared
		if alg.prefix != "" {
			// One string for both: the key the script gets, and its tail
			// that names the check everywhere else.
			op.key = redisKey(alg.prefix, op.check.Rule.Name, op.digest)
			op.base = op.key[len(alg.prefix):]
		} else {
			op.base = redisBaseKey(op.check.Rule.Name, op.digest)
		}
		if alg.member {
			op.memberID = r.nextMemberID()
		}
	}
	n := r.single
	if r.cc != nil {
		n = r.nodeOf(ctx, ops[0].base)
		for _, op := range ops[1:] {
			if r.nodeOf(ctx, op.base) != n {
				r.askEach(ctx, ops, ds, u, fallback)
				return
			}
		}
	}
	r.askNode(ctx, n, ops, ds, u, fallback)
}

// askEach decides, on a Cluster, the checks of a request whose keys live on
// several masters: each on its own master, with that master's breaker and
// failure modes, shortest period first, stopping at the first denial (a
// limit or a failure mode's) and giving back what the earlier ones took.
func (r *Limiter) askEach(ctx context.Context, ops []*sharedOp, ds []limiter.Decision, u *recorded, fallback limiter.Fallback) {
	ordered := slices.Clone(ops)
	slices.SortStableFunc(ordered, func(a, b *sharedOp) int {
		return cmp.Compare(a.check.Limit.Period, b.check.Limit.Period)
	})
	for _, op := range ordered {
		r.askNode(ctx, r.nodeOf(ctx, op.base), []*sharedOp{op}, ds, u, fallback)
		if !ds[op.index].Allowed {
			if len(u.ops) > 0 {
				r.adjust(ctx, u.ops, func(*sharedOp) int64 { return 0 })
				u.ops = u.ops[:0]
			}
			return
		}
	}
}

// askNode decides ops, whose keys all live on n, as ask says.
func (r *Limiter) askNode(ctx context.Context, n *node, ops []*sharedOp, ds []limiter.Decision, u *recorded, fallback limiter.Fallback) {
	ok, probe := n.breaker.allow()
	if !ok {
		r.stats.failFast.Add(1)
		for _, op := range ops {
			ds[op.index] = r.degrade(op, fallback)
		}
		return
	}
	if err := r.slots.enter(ctx, r.queueTimeout); err != nil {
		n.breaker.release(probe)
		r.stats.overloaded.Add(1)
		for _, op := range ops {
			ds[op.index] = overloaded(op.check)
		}
		return
	}
	timeout := r.timeout
	if probe {
		// The probe may have to dial and handshake again, and a flood
		// answered by the failure modes meanwhile competes for the CPU: a
		// probe that times out keeps the limit off for another cooldown.
		timeout = max(timeout, r.cooldown/2)
	}
	started := r.clock()
	var err error
	if reservesUnits(ops) {
		err = r.roundTripOrGiveBack(ctx, ops, timeout, r.slots.release)
	} else {
		var rtCtx context.Context
		if r.pipelines >= 0 {
			// A coalesced decision is one call in a shared pipeline, and the
			// pipeline takes its deadline from its calls' (coalescer.send):
			// saying the deadline is enough, it needs no timer of its own.
			rtCtx = u.withDeadline(ctx, time.Now().Add(timeout))
		} else {
			var cancel context.CancelFunc
			rtCtx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		_, err = r.roundTrip(rtCtx, ops, u)
		r.slots.release()
	}
	r.stats.roundTrips.Add(1)

	switch r.classify(ctx, n, started, err, probe, ops[0].base) {
	case outcomeOverload:
		r.stats.overloaded.Add(1)
		for _, op := range ops {
			ds[op.index] = overloaded(op.check)
		}
	case outcomeSuspect:
		for _, op := range ops {
			if mode := op.check.Rule.OnRedisError; mode == limiter.FailDeny || mode == limiter.FailLocal {
				ds[op.index] = r.degrade(op, fallback)
			} else {
				r.stats.overloaded.Add(1)
				ds[op.index] = overloaded(op.check)
			}
		}
	case outcomeFailure:
		for _, op := range ops {
			ds[op.index] = r.degrade(op, fallback)
		}
	default:
		r.record(ops, ds, u, started)
	}
}

// errClosed answers a decision that would outlive Close.
var errClosed = errors.New("limiter: redis limiter closed")

// lateAllowance is how long a reply that must not be lost is awaited: a
// late reservation's (roundTripOrGiveBack) and an adjustment's. It is the
// timeout plus what a probe may take beyond it (half a cooldown), so that a
// starved instance that reads replies late still reads these.
func (r *Limiter) lateAllowance() time.Duration { return r.timeout + r.cooldown/2 }

// reservesUnits reports whether one of ops takes more than one unit (an
// llm call's tokens): a timeout of such a round trip must not leave them
// taken (see roundTripOrGiveBack).
func reservesUnits(ops []*sharedOp) bool {
	for _, op := range ops {
		if op.cost > 1 {
			return true
		}
	}
	return false
}

// roundTripOrGiveBack is the round trip of ops for a decision that must be
// answered within timeout, but whose reply is still read for a while after
// it. A timeout is ambiguous: Redis may have run the script and recorded
// the checks, and the reply come too late for a starved instance to read
// (a loaded machine; a 30ms deadline). The request is then denied by its
// failure mode (503 for deny) while Redis counts its cost, hundreds of
// tokens an llm call, that no one will ever settle. So the call runs on a
// goroutine with lateAllowance to answer; the caller waits at most timeout
// (or until ctx ends), and a reply that comes after the caller gave up has
// what it recorded given back. A check of one unit (most requests) goes the plain way: a timeout
// then counts at most that unit. release frees the round trip's slot once
// the call ends, not when the caller stops waiting, so the slots still
// bound the calls in flight. The goroutine is Close's to wait for.
func (r *Limiter) roundTripOrGiveBack(ctx context.Context, ops []*sharedOp, timeout time.Duration, release func()) error {
	const (
		pending = iota
		delivered
		abandoned
	)
	var state atomic.Int32
	done := make(chan error, 1)
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(timeout, r.lateAllowance()))
	if !r.goBackground(func() {
		defer cancel()
		// nil: the decision's own call buffer is not lent to a call that
		// may outlive the decision.
		_, err := r.roundTrip(callCtx, ops, nil)
		release()
		if state.CompareAndSwap(pending, delivered) {
			done <- err
			return
		}
		// The caller answered without this reply: give back what it took.
		var taken []*sharedOp
		for _, op := range ops {
			if op.taken {
				taken = append(taken, op)
			}
		}
		if len(taken) > 0 {
			r.adjust(callCtx, taken, func(*sharedOp) int64 { return 0 })
		}
	}) {
		cancel()
		release()
		return errClosed
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
	case <-ctx.Done():
	}
	if !state.CompareAndSwap(pending, abandoned) {
		return <-done // the reply came in the meantime
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// record turns Redis's answers into decisions, remembers the denials, and
// keeps what was taken for the undo. sent is when the round trip was sent:
// Redis decided after it, so a denial cached from then on never outlasts
// Redis's own (the reply's way back, slow under load, is not added to it).
func (r *Limiter) record(ops []*sharedOp, ds []limiter.Decision, u *recorded, sent time.Time) {
	now := sent
	for _, op := range ops {
		if !op.asked {
			continue // on a Cluster, after an earlier check denied: not asked
		}
		d := r.decision(op)
		ds[op.index] = d
		if op.taken {
			u.ops = append(u.ops, op)
		}
		// A slot frees whenever a request ends: no denial of one is cached.
		switch {
		case !d.Allowed && d.RetryAfter > 0 && op.check.Rule.Algorithm != limiter.SharedConcurrency:
			r.denials.put(op.denialKey(), op.cost, now, now.Add(d.RetryAfter), now.Add(max(d.ResetAfter, d.RetryAfter)))
		case d.Allowed:
			// The key may be one whose denial others answer from while this
			// request refreshed it: they stop now.
			r.denials.forget(op.denialKey())
		}
	}
}

// roundTrip decides ops on Redis and leaves each op's reply or error in the
// op. It reports whether the ops were recorded (all admitted) and the error
// of the first failed call, if any.
//
// A request is one decideScript call covering all its checks, all or
// nothing, on a standalone server or Sentinel's master. On a Cluster the
// checks of one request live in different slots, which no script can span:
// they are decided one call at a time, shortest period first, stopping at
// the first denial, and what the earlier ones took is refunded. Shortest
// first means a request that a per-second limit denies never reaches the
// hourly quota, so the quota's refunds (and a denial cached while one is in
// flight) only arise on the rarer path where the longer limit denies.
//
// u lends its call buffer (see recorded.buffer) to a request's one call.
func (r *Limiter) roundTrip(ctx context.Context, ops []*sharedOp, u *recorded) (recorded bool, err error) {
	if !r.cluster || len(ops) == 1 {
		return r.decideAll(ctx, ops, modeRecord, u.buffer())
	}

	ordered := slices.Clone(ops)
	slices.SortStableFunc(ordered, func(a, b *sharedOp) int {
		return cmp.Compare(a.check.Limit.Period, b.check.Limit.Period)
	})
	var taken []*sharedOp
	for _, op := range ordered {
		ok, err := r.decideAll(ctx, []*sharedOp{op}, modeRecord, nil)
		if err != nil || !ok {
			if len(taken) > 0 {
				r.adjust(ctx, taken, func(*sharedOp) int64 { return 0 })
				for _, t := range taken {
					t.taken = false
				}
			}
			return false, err
		}
		taken = append(taken, op)
	}
	return true, nil
}

// decideAll runs decideScript once for ops, whose keys must share a slot
// unless the server is not a Cluster. buf, when not nil, holds the call.
func (r *Limiter) decideAll(ctx context.Context, ops []*sharedOp, mode scriptMode, buf *callBuf) (recorded bool, err error) {
	var cmds []redis.Cmder
	var args []any
	if buf != nil {
		cmds, args = buf.cmds[:1], buf.args[:0]
	} else {
		cmds = make([]redis.Cmder, 1)
	}
	cmd, err := decideCmdIn(ctx, ops, mode, args)
	if err != nil {
		return false, err
	}
	cmds[0] = cmd
	r.exec(ctx, cmds)
	v, err := cmd.Result()
	if err != nil {
		return false, err
	}
	recorded, err = readDecideReply(v, len(ops), func(i int, rep scriptReply) { ops[i].reply = rep })
	if err != nil {
		return false, err
	}
	for _, op := range ops {
		op.asked, op.taken = true, recorded
	}
	return recorded, nil
}

// decideCmd builds the decideScript call for ops.
func decideCmd(ctx context.Context, ops []*sharedOp, mode scriptMode) (*redis.IntSliceCmd, error) {
	return decideCmdIn(ctx, ops, mode, nil)
}

// decideCmdIn is decideCmd building the call's arguments in a, when it has
// room. They are built in one slice, as newEvalCmd would build them, with
// what is the same in every call boxed once, and each check's numbers
// passed as pointers to the op's (go-redis writes a *int64 as its value):
// this runs for every decision, and each boxed value is an allocation. Its
// reply is read as integers, what the script returns, none of them boxed.
func decideCmdIn(ctx context.Context, ops []*sharedOp, mode scriptMode, a []any) (*redis.IntSliceCmd, error) {
	if need := 5 + 7*len(ops); cap(a) < need {
		a = make([]any, 0, need)
	}
	a = append(a, argEvalsha, argDecideSHA, nil)
	for _, op := range ops {
		alg := algorithmOf(op.check.Rule.Algorithm)
		switch {
		case alg == nil:
			return nil, fmt.Errorf("limiter: algorithm %q is not shared", op.check.Rule.Algorithm)
		case op.key != "":
			a = append(a, op.key)
		default:
			for _, s := range alg.suffixes {
				a = append(a, alg.prefix+op.base+s)
			}
		}
	}
	a[2] = len(a) - evalFirstKey
	a = append(a, len(ops), argMode(mode))
	for _, op := range ops {
		c := op.check
		alg := algorithmOf(c.Rule.Algorithm)
		period := max(1, c.Limit.Period.Microseconds())
		if c.Limit.Calendar == limiter.CalendarMonth {
			period = 0 // the fixed window's calendar month (see fixedLua)
		}
		op.nums[argRate], op.nums[argPeriod], op.nums[argQuota], op.nums[argCost] = c.Limit.Rate, period, c.Limit.Quota(), op.cost
		a = append(a, alg.arg)
		for i := range op.nums {
			a = append(a, &op.nums[i])
		}
		if alg.member { // what the log and the lease set hold
			a = append(a, op.member(op.cost))
		}
	}
	cmd := redis.NewIntSliceCmd(ctx, a...)
	cmd.SetFirstKeyPos(evalFirstKey)
	return cmd, nil
}

// decision turns a Redis answer into a Decision. A check that Redis would
// have admitted but did not record (another check of the request denied)
// shows what it still has, its cost not taken.
func (r *Limiter) decision(op *sharedOp) limiter.Decision {
	c := op.check
	d := limiter.Decision{Policy: c.Rule.Name, Limit: c.Limit}
	rep := op.reply
	d.Allowed, d.Remaining, d.ResetAfter = rep.allowed, rep.remaining, rep.resetAfter
	if alg := algorithmOf(c.Rule.Algorithm); alg != nil && alg.remaining != nil {
		d.Remaining = alg.remaining(c.Limit, d.ResetAfter)
	}
	switch {
	case !d.Allowed:
		d.Reason = limiter.ReasonLimited
		d.RetryAfter = rep.retryAfter
	case !op.taken:
		d.Remaining = min(d.Remaining+op.cost, c.Limit.Quota())
	}
	return d
}

// finish returns the decisions of a request and, unless one of them denied
// it (Redis then recorded nothing), what Redis recorded.
func finish(ds []limiter.Decision, u *recorded) ([]limiter.Decision, limiter.Settler) {
	for _, d := range ds {
		if !d.Allowed && d.Reason != limiter.ReasonNotAsked {
			return ds, nil
		}
	}
	return ds, u.settler()
}

// overloaded is the decision for a check that could not be asked in time.
func overloaded(c limiter.Check) limiter.Decision {
	return limiter.Decision{Policy: c.Rule.Name, Limit: c.Limit, Reason: limiter.ReasonOverloaded, RetryAfter: overloadRetry}
}

func policyName(c limiter.Check) string {
	if c.Rule == nil {
		return ""
	}
	return c.Rule.Name
}

func (op *sharedOp) denialKey() denialKey {
	return denialKey{policy: op.check.Rule.Name, limit: op.check.Limit, key: op.digest}
}

// Peek implements limiter.Peeker: each check's state on Redis, what its
// Units would find, without recording anything (decideScript in peek mode;
// one call per check on a Cluster). A key the denial cache holds denied for
// that cost is answered from it, as Decide would be. A check Redis does not
// answer comes back ReasonUnavailable; peeking never feeds the breaker.
func (r *Limiter) Peek(ctx context.Context, checks []limiter.Check) []limiter.Decision {
	ds := make([]limiter.Decision, len(checks))
	var ops []*sharedOp
	for i, c := range checks {
		ds[i] = limiter.Decision{Policy: policyName(c), Limit: c.Limit, Reason: limiter.ReasonUnavailable}
		if c.Rule == nil || !c.Rule.Algorithm.Shared() {
			continue
		}
		if d, static := c.StaticDenial(); static {
			ds[i] = d
			continue
		}
		op := &sharedOp{index: i, check: c, cost: c.Units(), digest: digestKey(c.Key)}
		if den, ok := r.denials.get(op.denialKey(), op.cost, r.clock()); ok {
			now := r.clock().UnixNano()
			ds[i].Reason = limiter.ReasonDenialCached
			ds[i].RetryAfter = max(0, time.Duration(den.until-now))
			ds[i].ResetAfter = max(ds[i].RetryAfter, time.Duration(den.resetAt-now))
			continue
		}
		op.base = redisBaseKey(c.Rule.Name, op.digest)
		if algorithmOf(c.Rule.Algorithm).member {
			op.memberID = "peek"
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return ds
	}
	if err := r.slots.enter(ctx, r.queueTimeout); err != nil {
		return ds
	}
	defer r.slots.release()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	groups := [][]*sharedOp{ops}
	if r.cluster {
		groups = groups[:0]
		for _, op := range ops {
			groups = append(groups, []*sharedOp{op})
		}
	}
	for _, g := range groups {
		if _, err := r.decideAll(ctx, g, modePeek, nil); err != nil {
			continue
		}
		for _, op := range g {
			ds[op.index] = r.decision(op)
		}
	}
	return ds
}
