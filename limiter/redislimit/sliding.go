package redislimit

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The sliding window keeps an exact log: a ZSET of the admitted requests
// scored by Redis time in microseconds, each member "<unique>:<cost>", and
// the sum of the logged costs in a second key so that counting costs O(1).
// Entries that left the window are subtracted once, when they are trimmed. A
// request passes when the sum of what is in the window plus its cost is at
// most the quota; a denied request records nothing (it may only trim what
// already left the window). Its retry time is when the oldest entries holding
// the missing units leave the window.

// slidingLua is decideScript's sliding window (see algorithm.lua).
const slidingLua = `
local function cost_of(member)
  return tonumber(string.match(member, ":(%d+)$")) or 1
end

local function decide(log, sum_key, limit, window, cost, member)
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
    return 0, math.max(0, limit - sum), retry, reset, 0
  end
  return 1, limit - sum - cost, 0, window, 0, function()
    local ttl = math.ceil(window / 1000)
    redis.call("ZADD", log, now_us, member)
    redis.call("PEXPIRE", log, ttl)
    redis.call("SET", sum_key, sum + cost, "PX", ttl)
  end
end

`

// slidingAdjustScript changes the cost of one admitted entry by delta,
// keeping its place in time: the entry is renamed to carry its new cost, or
// removed when nothing is left of it.
//
// KEYS[1] log, KEYS[2] sum; ARGV member, new member, delta.
const slidingAdjustSrc = `
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score then return 0 end
local delta = tonumber(ARGV[3])
local cost = tonumber(string.match(ARGV[1], ":(%d+)$")) or 1
redis.call("ZREM", KEYS[1], ARGV[1])
if cost + delta > 0 then redis.call("ZADD", KEYS[1], score, ARGV[2]) end
if redis.call("EXISTS", KEYS[2]) == 1 then
  if redis.call("INCRBY", KEYS[2], delta) <= 0 then redis.call("DEL", KEYS[2]) end
end
return 1
`

var slidingAdjustScript = redis.NewScript(slidingAdjustSrc)

// slidingSettle renames the check's log entry to its new cost
// (algorithm.settle).
func slidingSettle(op *sharedOp, units, delta int64) (*redis.Script, []string, []any) {
	return slidingAdjustScript, []string{op.base + slidingLogSuffix, op.base + slidingSumSuffix},
		[]any{op.member(op.cost), op.member(units), delta}
}

// nextMemberID returns the unique part of a sliding-window member, unique
// across instances: "<instance nonce>-<sequence>" (the member adds ":<cost>").
func (r *Limiter) nextMemberID() string {
	b := make([]byte, 0, 40)
	b = append(b, r.memberPrefix...)
	b = append(b, '-')
	b = strconv.AppendUint(b, r.seq.Add(1), 36)
	return string(b)
}
