package redislimit

import (
	"github.com/redis/go-redis/v9"
)

// The fixed window counts in windows aligned to Redis time (Unix ms
// multiples of the period). The counter expires at its window's end, and
// that expiry identifies the window: a counter whose PEXPIRETIME is not the
// current window's end (an old window, or a changed period) counts as zero.
// It checks before it counts, so a denied request writes nothing. Across a
// window edge it may admit up to twice the quota in a short time: the price
// of one counter per key.

// fixedLua is decideScript's fixed window.
const fixedLua = `
local function fixed(key, limit, period_us, cost)
  local period = math.max(1, math.floor(period_us / 1000))
  local now = math.floor(now_us / 1000)
  local reset_at = now - (now % period) + period
  local reset_us = (reset_at - now) * 1000
  local n = 0
  if redis.call("PEXPIRETIME", key) == reset_at then
    n = tonumber(redis.call("GET", key)) or 0
  end
  if n + cost > limit then
    return {0, math.max(0, limit - n), reset_us, reset_us, reset_at}
  end
  return {1, limit - n - cost, 0, reset_us, reset_at}, function()
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
