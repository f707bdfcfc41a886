package redislimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// shared_concurrency keeps a key's requests in flight as leases: a ZSET of
// holder members (unique across instances, see nextMemberID) scored by the
// instant, in Redis time (Unix ms), at which each lease lapses. A request
// passes when, expired leases trimmed, fewer than the limit remain; it then
// adds its own lease of one period. The request's held renews it every third
// of the lease while the request runs (see limiter.Reservation.KeepAlive) and
// removes it when the request ends. A crashed instance renews nothing, so its
// leases lapse by themselves: no slot is lost for longer than one lease.

// concurrencySuffix is the lease set's key under the base key.
const concurrencySuffix = ":cc"

// concurrencyLua is decideScript's shared_concurrency (see algorithm.lua;
// it has no use for the cost: a lease is one slot). The trim stays even
// when nothing is recorded: lapsed leases change no decision.
const concurrencyLua = `
local function decide(key, limit, lease_us, _, member)
  local now_ms = math.floor(now_us / 1000)
  local lease = math.max(1, math.floor(lease_us / 1000))
  redis.call("ZREMRANGEBYSCORE", key, "-inf", now_ms)
  local held = redis.call("ZCARD", key)
  if held >= limit then
    local reset = 0
    local last = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
    if #last == 2 then reset = (tonumber(last[2]) - now_ms) * 1000 end
    return 0, 0, math.min(` + slotRetryMicros + `, reset), reset, 0
  end
  return 1, limit - held - 1, 0, lease * 1000, 0, function()
    redis.call("ZADD", key, now_ms + lease, member)
    if redis.call("PTTL", key) < lease then redis.call("PEXPIRE", key, lease) end
  end
end

`

// slotRetryMicros is limiter.SlotRetryAfter as the script spells it
// (TestSlotRetryMatches keeps them equal).
const slotRetryMicros = "1000000"

// concurrencyReleaseScript removes one lease. KEYS[1] lease set; ARGV member.
const concurrencyReleaseSrc = `return redis.call("ZREM", KEYS[1], ARGV[1])`

var concurrencyReleaseScript = redis.NewScript(concurrencyReleaseSrc)

// concurrencySettle releases the lease once the check holds nothing: a
// lease is one slot whatever the cost, kept until then (algorithm.settle).
func concurrencySettle(op *sharedOp, units, _ int64) (*redis.Script, []string, []any) {
	if units > 0 {
		return nil, nil, nil
	}
	return concurrencyReleaseScript, []string{op.base + concurrencySuffix}, []any{op.member(op.cost)}
}

// concurrencyRenewScript extends a lease still held to a full lease from
// now; a lease already lapsed (and maybe taken by another request) is not
// brought back. It replies 1 when renewed, 0 when lost.
//
// KEYS[1] lease set; ARGV member, lease in ms.
const concurrencyRenewSrc = `
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then return 0 end
local t = redis.call("TIME")
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call("ZADD", KEYS[1], "XX", now_ms + lease, ARGV[1])
if redis.call("PTTL", KEYS[1]) < lease then redis.call("PEXPIRE", KEYS[1], lease) end
return 1
`

var concurrencyRenewScript = redis.NewScript(concurrencyRenewSrc)

var _ limiter.Renewer = (*recorded)(nil)

// leases returns the ops of h that hold a lease.
func (h *recorded) leases() []*sharedOp {
	var ls []*sharedOp
	for _, op := range h.ops {
		if op.taken && op.check.Rule.Algorithm == limiter.SharedConcurrency {
			ls = append(ls, op)
		}
	}
	return ls
}

// RenewEvery implements limiter.Renewer: a third of the shortest lease, so
// that two renewals may fail before a lease lapses.
func (h *recorded) RenewEvery() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var every time.Duration
	for _, op := range h.leases() {
		if d := op.check.Limit.Period / 3; every == 0 || d < every {
			every = d
		}
	}
	return every
}

// Renew implements limiter.Renewer, in one pipeline bounded by the timeout.
// A lease found lapsed (Redis unreachable for a whole lease, or a pause) is
// logged and counted (Stats.LeasesLost): its slot may already be another
// request's, so the key may briefly have one more request in flight than
// its limit.
func (h *recorded) Renew(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ls := h.leases()
	if len(ls) == 0 {
		return
	}
	r := h.r
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmds := make([]redis.Cmder, len(ls))
	for i, op := range ls {
		cmds[i] = newEvalCmd(ctx, "evalsha", concurrencyRenewScript.Hash(),
			[]string{op.base + concurrencySuffix}, []any{op.member(op.cost), max(1, op.check.Limit.Period.Milliseconds())})
	}
	r.exec(ctx, cmds)
	for i, c := range cmds {
		n, err := c.(*redis.Cmd).Int64()
		switch {
		case err == nil && n == 1:
			continue
		case err == nil:
			r.stats.leasesLost.Add(1)
		default:
			r.stats.renewErrors.Add(1)
		}
		if m, ok := r.errLog.allow(r.clock()); ok {
			r.log.Warn("redis limiter: renewing an in-flight lease failed", "policy", ls[i].check.Rule.Name,
				"lost", err == nil, "error", err, "suppressed", m)
		}
	}
}
