// Package redislimit is the limiter's shared backend: limits that every
// gateway instance enforces together through one Redis (standalone,
// Sentinel or Cluster). A Limiter implements limiter.Backend.
//
// One file tells each part of the story: decide.go follows a request's
// checks from the denial cache to Redis and back; gcra.go, sliding.go,
// fixed.go and concurrency.go each hold one algorithm (its Lua, its
// settle); algorithms.go is the table of them, from which the script's
// dispatch and a check's arguments are built; script.go puts the
// algorithms together into the one script a request calls; failure.go is
// what happens when Redis does not answer (failure modes, whose local share
// the Engine's fallback decides, the breaker, and telling a hung Redis from
// a starved gateway); settle.go settles what Redis recorded; node.go keeps that health
// per Redis server (each Cluster master apart) and routes each call to its
// key's master; health.go is the background check (Run), readiness's
// view (Health) and the rights check at start (CheckAccess); keys.go names
// the keys. The go-redis client it decides through is built by
// internal/redisclient and handed in: the process has one, shared with the
// idempotency store.
//
// Adding a shared algorithm touches three files: its name in limiter (an
// Algorithm in Algorithms, and Shared); a file of its own here, with the
// Lua that decides one check ("local function decide(keys..., quota,
// period_us, cost[, member])", see algorithm.lua) and its settle; and its
// entry in the algorithms table, which names its keys and says whether it
// sends a member. Decide, settling, Reset, the health check, explain
// (KeysFor) and the script's dispatch then know it.
//
// All the checks of one request are decided by one script call, all or
// nothing, timed by Redis's clock: a request that one policy denies takes
// nothing from the others, and gateway clocks may drift. The script carries
// the gateway's one GCRA, which keeps redis_rate's state format, so a key
// is read and written alike by both (a test fails if an upgrade changes
// it), because redis_rate sends its script and reads the reply in one call:
// it can neither take part in another script's all-or-nothing decision nor
// share a pipeline. Every check goes through the script, gathering on or
// off. Measured against calling AllowN once per check (BenchmarkRedisDecide,
// same run): two GCRA checks in one script call cost one round trip where
// two AllowN calls cost two.
package redislimit
