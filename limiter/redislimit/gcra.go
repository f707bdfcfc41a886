package redislimit

import (
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// GCRA, the generic cell rate algorithm: one timestamp per key, the
// theoretical arrival time (TAT) at which the key's bucket is full again.
// Taking n units moves it forward by n emission intervals (period / rate);
// a request passes when the new TAT is at most burst intervals ahead.
//
// Every GCRA check is decided by decideScript (gcraLua below), the one
// GCRA of the gateway: redis_rate's AllowN sends its script and reads its
// reply in one call, so it can neither join another check's all-or-nothing
// decision nor share a pipeline. gcraLua keeps redis_rate's state exactly
// (the key "rate:<key>", a float TAT in seconds since 2017-01-01, its
// expiry), so redis_rate and the gateway decide on one key alike, and an
// upgrade from a gateway that called AllowN keeps every key's state;
// TestGCRAStateSharedWithRedisRate fails if an upgrade of redis_rate changes
// that. Measured (BenchmarkRedisDecide): one decideScript call for two GCRA
// checks costs one round trip where two AllowN calls cost two.

// gcraLua is decideScript's GCRA: redis_rate's arithmetic, split into a
// decision and a record, so the record happens only if every check of the
// request admits. It is the GCRA branch of decideLoop, inline (no function
// call per check), reading the loop's locals. Within one call a key's TAT
// is read once and written once (after the loop): a merged call often
// carries many requests of one hot key, and each redis.call costs Redis
// more than the arithmetic. tats holds each key's TAT as read, already
// raised to now (every use raises it); a recorded TAT is kept negated, which
// marks it to be written (a TAT is seconds since 2017, never negative). The
// limit's numbers are parsed only when they differ from the previous GCRA
// check's (a merged call mostly repeats one policy's).
const gcraLua = `
      if {rate} ~= rate_s or {period} ~= period_s then
        rate_s, period_s = {rate}, {period}
        emission = (tonumber(period_s) / 1000000) / tonumber(rate_s)
      end
      if {quota} ~= burst_s then burst_s = {quota}; burst = tonumber(burst_s) end
      if {cost} ~= cost_s then cost_s = {cost}; cost = tonumber(cost_s) end
      local key = K[k + 1]
      local tat = tats[key]
      if tat == nil then
        tat = tonumber(call("GET", key))
        if not tat or tat < gcra_now then tat = gcra_now end
        tats[key] = tat
      elseif tat < 0 then
        tat = -tat
      end
      local new_tat = tat + emission * cost
      local allow_at = new_tat - emission * burst
      if gcra_now < allow_at then
        all = false
        reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6] =
          -1, 0, 0, ceil((allow_at - gcra_now) * 1000000), ceil((tat - gcra_now) * 1000000), 0
        r = r + 6
      else
        local reset = new_tat - gcra_now
        local us = ceil(reset * 1000000)
        if us >= 0 then
          reply[r + 1] = us
          r = r + 1
        else
          reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6] = -1, 1, 0, 0, us, 0
          r = r + 6
        end
        if reset > 0 then
          if n == 1 then
            if all then tats[key] = -new_tat end
          else
            nrec = nrec + 1
            rec_f[nrec], rec_v[nrec] = key, -new_tat
          end
        end
      end`

// gcraEpoch is redis_rate's epoch, 2017-01-01 UTC, as the scripts spell it:
// its TATs are seconds since then, so that a float keeps microseconds.
const gcraEpoch = "1483228800"

// gcraAdjustScript moves redis_rate's theoretical arrival time by delta
// units (the same float expression its script adds per unit): back to give
// units back, forward to take what a request cost beyond its reservation,
// counted from now when the bucket had refilled. redis_rate's own script
// cannot do this: it clamps the TAT to now first and never takes past the
// burst. A TAT that falls to now or before means a full bucket: the key goes.
//
// KEYS[1] redis_rate key; ARGV period_s, rate, delta.
const gcraAdjustSrc = `
local t = redis.call("TIME")
local now = (t[1] - ` + gcraEpoch + `) + (t[2] / 1000000)
local delta = tonumber(ARGV[3])
local tat = tonumber(redis.call("GET", KEYS[1]))
if not tat then
  if delta <= 0 then return 0 end
  tat = now
end
if delta > 0 then tat = math.max(tat, now) end
local new_tat = tat + (tonumber(ARGV[1]) / tonumber(ARGV[2])) * delta
if new_tat <= now then
  redis.call("DEL", KEYS[1])
else
  redis.call("SET", KEYS[1], new_tat, "EX", math.ceil(new_tat - now))
end
return 1
`

var gcraAdjustScript = redis.NewScript(gcraAdjustSrc)

// gcraSettle moves the TAT by delta units (algorithm.settle).
func gcraSettle(op *sharedOp, _, delta int64) (*redis.Script, []string, []any) {
	l := op.check.Limit
	return gcraAdjustScript, []string{gcraKeyPrefix + op.base}, []any{l.Period.Seconds(), l.Rate, delta}
}

// gcraRemaining derives the tokens left from the time until the bucket is
// full again. redis_rate's own Remaining truncates a float computed from
// epoch-sized numbers, so it often says one token less than there is (2 of 3
// reads 1.9999994, reported as 1). Rounding to a thousandth of a token only
// changes what is reported; admission stays the script's decision.
func gcraRemaining(l limiter.Limit, resetAfter time.Duration) int64 {
	emission := l.Period.Seconds() / float64(l.Rate)
	used := resetAfter.Seconds() / emission
	left := math.Floor(float64(l.Quota()) - used + 1e-3)
	return int64(min(max(0, left), float64(l.Quota())))
}
