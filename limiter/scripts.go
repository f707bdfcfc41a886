package limiter

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the shared algorithms. Each reads the clock with
// redis.call("TIME") so that gateway clocks may drift, touches only keys that
// share one hash tag (one Cluster slot), and sets an expiry on every key it
// writes so idle keys vanish by themselves.
//
// Decision scripts reply {allowed (0|1), remaining, retry_after_us,
// reset_after_us, extra}; extra is the fixed window's end in Unix ms (what
// its refund needs) and 0 otherwise.

// slidingWindowScript keeps an exact log: a ZSET of admitted requests scored
// by Redis time in microseconds, each member "<unique>:<cost>", and the sum
// of the logged costs in a second key so counting costs O(1). Entries that
// left the window are subtracted once, when they are trimmed. A denied
// request adds nothing (it may only trim what already left the window).
//
// KEYS[1] log, KEYS[2] sum; ARGV limit, window_us, cost, member.
const slidingWindowSrc = `
local log, sum_key = KEYS[1], KEYS[2]
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function cost_of(member)
  return tonumber(string.match(member, ":(%d+)$")) or 1
end

local sum = tonumber(redis.call("GET", sum_key))
local dirty = false
local old = redis.call("ZRANGEBYSCORE", log, "-inf", now - window)
if #old > 0 then
  redis.call("ZREMRANGEBYSCORE", log, "-inf", now - window)
  dirty = true
end
if redis.call("EXISTS", log) == 0 then
  sum = 0
elseif sum == nil then
  -- the sum was lost (eviction): rebuild it from the log
  sum, dirty = 0, true
  for _, m in ipairs(redis.call("ZRANGE", log, 0, -1)) do sum = sum + cost_of(m) end
else
  for _, m in ipairs(old) do sum = sum - cost_of(m) end
  if sum < 0 then sum = 0 end
end

if sum + cost > limit then
  if dirty then
    local pttl = redis.call("PTTL", log)
    if pttl > 0 and sum > 0 then
      redis.call("SET", sum_key, sum, "PX", pttl)
    else
      redis.call("DEL", sum_key)
    end
  end
  -- retry when the oldest entries holding the missing units have left
  local need, freed, at, offset = sum + cost - limit, 0, nil, 0
  while at == nil do
    local page = redis.call("ZRANGE", log, offset, offset + 127, "WITHSCORES")
    if #page == 0 then break end
    for i = 1, #page, 2 do
      freed = freed + cost_of(page[i])
      if freed >= need then at = tonumber(page[i + 1]) break end
    end
    offset = offset + 128
  end
  local retry = window
  if at then retry = at + window - now end
  local reset = 0
  local newest = redis.call("ZRANGE", log, -1, -1, "WITHSCORES")
  if #newest == 2 then reset = tonumber(newest[2]) + window - now end
  return {0, math.max(0, limit - sum), retry, reset, 0}
end

local ttl = math.ceil(window / 1000)
redis.call("ZADD", log, now, ARGV[4])
redis.call("PEXPIRE", log, ttl)
redis.call("SET", sum_key, sum + cost, "PX", ttl)
return {1, limit - sum - cost, 0, window, 0}
`

var slidingWindowScript = redis.NewScript(slidingWindowSrc)

// slidingRefundScript removes one admitted entry again.
//
// KEYS[1] log, KEYS[2] sum; ARGV member, cost.
const slidingRefundSrc = `
if redis.call("ZREM", KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call("EXISTS", KEYS[2]) == 1 then
  if redis.call("DECRBY", KEYS[2], ARGV[2]) <= 0 then redis.call("DEL", KEYS[2]) end
end
return 1
`

var slidingRefundScript = redis.NewScript(slidingRefundSrc)

// fixedWindowScript counts in windows aligned to Redis time (Unix ms
// multiples of the period). The counter expires at its window's end, and
// that expiry identifies the window: a counter whose PEXPIRETIME is not the
// current window's end (an old window, or a changed period) counts as zero.
// It checks before it increments, so a denied request writes nothing.
//
// KEYS[1] counter; ARGV limit, period_ms, cost.
const fixedWindowSrc = `
local key = KEYS[1]
local limit, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reset_at = now - (now % period) + period
local reset_us = (reset_at - now) * 1000
local n = 0
if redis.call("PEXPIRETIME", key) == reset_at then
  n = tonumber(redis.call("GET", key)) or 0
end
if n + cost > limit then
  return {0, math.max(0, limit - n), reset_us, reset_us, reset_at}
end
if n == 0 then
  redis.call("SET", key, cost, "PXAT", reset_at)
else
  redis.call("INCRBY", key, cost)
end
return {1, limit - n - cost, 0, reset_us, reset_at}
`

var fixedWindowScript = redis.NewScript(fixedWindowSrc)

// fixedRefundScript gives cost back to the window that took it, and only to
// that window.
//
// KEYS[1] counter; ARGV window_end_ms, cost.
const fixedRefundSrc = `
if redis.call("PEXPIRETIME", KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
if redis.call("DECRBY", KEYS[1], ARGV[2]) <= 0 then redis.call("DEL", KEYS[1]) end
return 1
`

var fixedRefundScript = redis.NewScript(fixedRefundSrc)

// gcraRefundScript moves redis_rate's theoretical arrival time back by what
// one AllowN took (the same float expression its script added). redis_rate's
// own script cannot do this with a negative cost: it clamps the TAT to now
// first. A TAT that falls to now or before means a full bucket: the key goes.
//
// KEYS[1] redis_rate key; ARGV period_s, rate, cost.
const gcraRefundSrc = `
local tat = redis.call("GET", KEYS[1])
if not tat then return 0 end
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local new_tat = tonumber(tat) - (tonumber(ARGV[1]) / tonumber(ARGV[2])) * tonumber(ARGV[3])
if new_tat <= now then
  redis.call("DEL", KEYS[1])
else
  redis.call("SET", KEYS[1], new_tat, "EX", math.ceil(new_tat - now))
end
return 1
`

var gcraRefundScript = redis.NewScript(gcraRefundSrc)

// scriptReply is a decision script's parsed reply.
type scriptReply struct {
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	extra      int64
}

// parseScriptReply checks every element's type: a reply of another shape is
// an error, never a panic.
func parseScriptReply(v any) (scriptReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 5 {
		return scriptReply{}, fmt.Errorf("limiter script: unexpected reply %T %v", v, v)
	}
	var n [5]int64
	for i, e := range arr {
		x, ok := e.(int64)
		if !ok {
			return scriptReply{}, fmt.Errorf("limiter script: reply[%d] is %T, want integer", i, e)
		}
		n[i] = x
	}
	return scriptReply{
		allowed:    n[0] == 1,
		remaining:  max(0, n[1]),
		retryAfter: time.Duration(max(0, n[2])) * time.Microsecond,
		resetAfter: time.Duration(max(0, n[3])) * time.Microsecond,
		extra:      n[4],
	}, nil
}
