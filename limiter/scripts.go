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
// For each check the decision script replies {allowed (0|1), remaining,
// retry_after_us, reset_after_us, extra}; extra is the fixed window's end in
// Unix ms (what its refund needs) and 0 otherwise. The refund scripts give
// back what an admitted check took (used on a Cluster, whose checks are
// decided one slot at a time, and for reconciling a cost afterwards).

// decideScript decides every shared check of one request at once, all or
// nothing: each check is decided against the state as it is, and only when
// all of them admit are they all recorded. So a request that one policy
// denies costs the others nothing, and no refund is ever in flight for
// another request to trip over. Every key of the call must be in one Cluster
// slot, so on a Cluster a request with checks on several keys calls it once
// per check (see roundTrip).
//
// ARGV[1] is the number of checks n; then 6 values per check: algorithm
// ("gcra", "sliding_window", "fixed_window"), rate, period in microseconds,
// quota (GCRA's burst, a window's count), cost, member (sliding window). KEYS holds 2 keys per check: GCRA
// its redis_rate key twice, the sliding window its log and sum, the fixed
// window its counter twice. The reply is 5 integers per check (see
// scriptReply) followed by 1 when the checks were recorded, 0 when not.
//
// GCRA keeps redis_rate's state (a float TAT in seconds since 2017-01-01 at
// "rate:<key>") so the two can decide on one key alike; a test holds them
// to it. The sliding window keeps an exact log: a ZSET of admitted requests
// scored by Redis time in microseconds, members "<unique>:<cost>", and the
// sum of the logged costs in a second key so counting is O(1); entries that
// left the window are subtracted once, when trimmed. The fixed window counts
// in windows aligned to Redis time (Unix ms multiples of the period); the
// counter expires at its window's end, and that expiry identifies the window:
// a counter whose PEXPIRETIME is not the current window's end counts as zero.
const decideSrc = `
local t = redis.call("TIME")
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function gcra(key, rate, period_us, burst, cost)
  local now = (tonumber(t[1]) - 1483228800) + (tonumber(t[2]) / 1000000)
  local emission = (period_us / 1000000) / rate
  local tat = tonumber(redis.call("GET", key)) or now
  tat = math.max(tat, now)
  local new_tat = tat + emission * cost
  local allow_at = new_tat - emission * burst
  if now < allow_at then
    return {0, 0, math.ceil((allow_at - now) * 1000000), math.ceil((tat - now) * 1000000), 0}
  end
  local reset = new_tat - now
  return {1, 0, 0, math.ceil(reset * 1000000), 0}, function()
    if reset > 0 then redis.call("SET", key, new_tat, "EX", math.ceil(reset)) end
  end
end

local function cost_of(member)
  return tonumber(string.match(member, ":(%d+)$")) or 1
end

local function sliding(log, sum_key, limit, window, cost, member)
  local sum = tonumber(redis.call("GET", sum_key))
  local dirty = false
  local old = redis.call("ZRANGEBYSCORE", log, "-inf", now_us - window)
  if #old > 0 then
    redis.call("ZREMRANGEBYSCORE", log, "-inf", now_us - window)
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
  if dirty then
    -- Trimming changes no decision, so it stays even when nothing is recorded.
    local pttl = redis.call("PTTL", log)
    if pttl > 0 and sum > 0 then
      redis.call("SET", sum_key, sum, "PX", pttl)
    else
      redis.call("DEL", sum_key)
    end
  end
  if sum + cost > limit then
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
    if at then retry = at + window - now_us end
    local reset = 0
    local newest = redis.call("ZRANGE", log, -1, -1, "WITHSCORES")
    if #newest == 2 then reset = tonumber(newest[2]) + window - now_us end
    return {0, math.max(0, limit - sum), retry, reset, 0}
  end
  return {1, limit - sum - cost, 0, window, 0}, function()
    local ttl = math.ceil(window / 1000)
    redis.call("ZADD", log, now_us, member)
    redis.call("PEXPIRE", log, ttl)
    redis.call("SET", sum_key, sum + cost, "PX", ttl)
  end
end

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

local n = tonumber(ARGV[1])
local reply, records, all = {}, {}, true
for i = 1, n do
  local a = 1 + (i - 1) * 6
  local alg, rate, period, burst, cost = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local k1, k2 = KEYS[2 * i - 1], KEYS[2 * i]
  local res, record
  if alg == "gcra" then
    res, record = gcra(k1, rate, period, burst, cost)
  elseif alg == "sliding_window" then
    res, record = sliding(k1, k2, burst, period, cost, ARGV[a + 6])
  elseif alg == "fixed_window" then
    res, record = fixed(k1, burst, period, cost)
  else
    return redis.error_reply("unknown algorithm " .. tostring(alg))
  end
  if res[1] == 0 then all = false end
  records[i] = record
  for _, v in ipairs(res) do reply[#reply + 1] = v end
end
if all then
  for i = 1, n do records[i]() end
end
reply[#reply + 1] = all and 1 or 0
return reply
`

var decideScript = redis.NewScript(decideSrc)

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
// one AllowN took (the same float expression its script and decideScript
// add). redis_rate's
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

// parseDecideReply reads decideScript's reply for n checks. It checks every
// element's type: a reply of another shape is an error, never a panic.
func parseDecideReply(v any, n int) (replies []scriptReply, recorded bool, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 5*n+1 {
		return nil, false, fmt.Errorf("limiter script: unexpected reply %T %v", v, v)
	}
	ints := make([]int64, len(arr))
	for i, e := range arr {
		x, ok := e.(int64)
		if !ok {
			return nil, false, fmt.Errorf("limiter script: reply[%d] is %T, want integer", i, e)
		}
		ints[i] = x
	}
	replies = make([]scriptReply, n)
	for i := range replies {
		replies[i] = newScriptReply([5]int64(ints[5*i : 5*i+5]))
	}
	return replies, ints[5*n] == 1, nil
}

func newScriptReply(n [5]int64) scriptReply {
	return scriptReply{
		allowed:    n[0] == 1,
		remaining:  max(0, n[1]),
		retryAfter: time.Duration(max(0, n[2])) * time.Microsecond,
		resetAfter: time.Duration(max(0, n[3])) * time.Microsecond,
		extra:      n[4],
	}
}
