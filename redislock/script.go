package redislock

import "github.com/redis/go-redis/v9"

// acquireScript takes the lock and draws a fencing token in one atomic step.
// KEYS[1] lock, KEYS[2] fencing counter; ARGV[1] token, ARGV[2] ttl in ms,
// ARGV[3] fencing counter TTL in ms (0: never expires). It returns the
// fencing token, or 0 when the lock is held.
//
// The token is the larger of the counter plus one and Redis's clock in
// microseconds since the epoch, and becomes the counter. The counter alone
// would start again at 1 once lost (a restart without persistence, an
// expired FenceTTL); the clock keeps going up across both, so tokens do not
// repeat or go back, and a counter left by an older INCR-only version (a
// small count) is passed at once. Tokens stay below 2^53 (about 9.0e15
// against 1.8e15 µs today), so a double holds them exactly, which is also
// what Lua computes with; "%.0f" writes them back without an exponent. A
// counter that is not a number, or that reached 2^53, is an error, and the
// lock just set is deleted again so that no lock without a token is left.
var acquireScript = redis.NewScript(`
redis.replicate_commands()
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 0
end
local stored = redis.pcall("GET", KEYS[2])
if type(stored) == "table" and stored.err then
  redis.call("DEL", KEYS[1])
  return stored
end
local last = 0
if stored then
  last = tonumber(stored)
  if last == nil or last ~= math.floor(last) or last < 0 then
    redis.call("DEL", KEYS[1])
    return redis.error_reply("fencing counter " .. KEYS[2] .. " is not a non-negative integer")
  end
end
local now = redis.call("TIME")
local fence = math.max(last + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
if fence >= 9007199254740992 then
  redis.call("DEL", KEYS[1])
  return redis.error_reply("fencing counter " .. KEYS[2] .. " reached 2^53")
end
local fenceTTL = tonumber(ARGV[3])
if fenceTTL > 0 then
  redis.call("SET", KEYS[2], string.format("%.0f", fence), "PX", fenceTTL)
else
  redis.call("SET", KEYS[2], string.format("%.0f", fence))
end
return fence
`)

// releaseScript deletes the lock only if it still holds the caller's token:
// a holder whose lock expired and was taken cannot delete the new holder's.
// It returns 1 when deleted, 0 when the lock was not the caller's.
var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
`)

// renewScript resets the lock's TTL only if it still holds the caller's
// token. ARGV[2] is the ttl in ms. It returns 1 when renewed, 0 when lost.
var renewScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
`)
