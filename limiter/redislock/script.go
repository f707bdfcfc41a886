package redislock

import "github.com/redis/go-redis/v9"

// acquireScript takes the lock and draws a fencing token in one atomic step.
// KEYS[1] lock, KEYS[2] fencing counter; ARGV[1] token, ARGV[2] ttl in ms,
// ARGV[3] fencing counter TTL in ms (0: never expires). It returns the
// fencing token (>= 1), or 0 when the lock is held. The counter is bumped
// with pcall: were it not an integer, the lock just set is deleted again
// so no lock without a fencing token is left behind.
var acquireScript = redis.NewScript(`
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 0
end
local fence = redis.pcall("INCR", KEYS[2])
if type(fence) == "table" and fence.err then
  redis.call("DEL", KEYS[1])
  return fence
end
local fenceTTL = tonumber(ARGV[3])
if fenceTTL > 0 then
  redis.call("PEXPIRE", KEYS[2], fenceTTL)
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
