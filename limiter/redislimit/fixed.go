package redislimit

import (
	"github.com/redis/go-redis/v9"
)

// The fixed window counts in windows aligned to Redis time (Unix ms
// multiples of the period; a 24h period is a UTC day), or in calendar months
// (UTC) when the period argument is 0. The counter expires at its window's end, and
// that expiry identifies the window: a counter whose PEXPIRETIME is not the
// current window's end (an old window, or a changed period) counts as zero.
// It checks before it counts, so a denied request writes nothing. Across a
// window edge it may admit up to twice the quota in a short time: the price
// of one counter per key.

// fixedLua is decideScript's fixed window (see algorithm.lua).
const fixedLua = monthEndLua + `
local function decide(key, limit, period_us, cost)
  local now = math.floor(now_us / 1000)
  local reset_at
  if period_us == 0 then
    reset_at = month_end(now)
  else
    local period = math.max(1, math.floor(period_us / 1000))
    reset_at = now - (now % period) + period
  end
  local reset_us = (reset_at - now) * 1000
  local n = 0
  if redis.call("PEXPIRETIME", key) == reset_at then
    n = tonumber(redis.call("GET", key)) or 0
  end
  if n + cost > limit then
    return 0, math.max(0, limit - n), reset_us, reset_us, reset_at
  end
  return 1, limit - n - cost, 0, reset_us, reset_at, function()
    if n == 0 then
      redis.call("SET", key, cost, "PXAT", reset_at)
    else
      redis.call("INCRBY", key, cost)
    end
  end
end

`

// fixedAdjustScript changes what a request counted in the window that
// took it, and only in that window, by delta: negative gives back, positive
// counts what the request cost beyond its reservation (even past the quota:
// later requests in the window are refused).
//
// KEYS[1] counter; ARGV window_end_ms, delta.
const fixedAdjustSrc = `
local window_end, delta = tonumber(ARGV[1]), tonumber(ARGV[2])
local expires = redis.call("PEXPIRETIME", KEYS[1])
if expires == -2 and delta > 0 then
  -- given back to zero earlier (the key went): count again while the window lasts
  local t = redis.call("TIME")
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= window_end then return 0 end
  redis.call("SET", KEYS[1], delta, "PXAT", window_end)
  return 1
end
if expires ~= window_end then return 0 end
if redis.call("INCRBY", KEYS[1], delta) <= 0 then redis.call("DEL", KEYS[1]) end
return 1
`

var fixedAdjustScript = redis.NewScript(fixedAdjustSrc)

// fixedSettle counts delta in the window that took the check, whose end
// its reply carried (algorithm.settle).
func fixedSettle(op *sharedOp, _, delta int64) (*redis.Script, []string, []any) {
	return fixedAdjustScript, []string{op.base + fixedSuffix}, []any{op.reply.extra, delta}
}

// monthEndLua computes, from Unix ms, the first instant (Unix ms) of the next
// calendar month in UTC: Howard Hinnant's civil-from-days and back, integer
// arithmetic on Lua's doubles (exact far beyond any date a gateway sees).
const monthEndLua = `
local function month_end(now_ms)
  local z = math.floor(now_ms / 86400000) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local y, m = yoe + era * 400, mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  y, m = y + math.floor(m / 12), m % 12 + 1 -- the next month
  if m <= 2 then y = y - 1 end
  era = math.floor(y / 400)
  yoe = y - era * 400
  mp = m + 9
  if m > 2 then mp = m - 3 end
  doy = math.floor((153 * mp + 2) / 5)
  doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return (era * 146097 + doe - 719468) * 86400000
end
`
