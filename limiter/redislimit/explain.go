package redislimit

import "github.com/ratelimit-gateway/gateway/limiter"

// KeysFor returns the Redis keys a check of rule on key reads and writes, as
// Decide builds them: under "rl:{<policy>:<digest of key>}", "rate:" in
// front for gcra (redis_rate's prefix), ":sw" and ":swn" after it for
// sliding_window (the log and its running sum), ":fw" for fixed_window and
// ":cc" for shared_concurrency (the lease set). It returns nil for a nil
// rule or an algorithm that keeps no state in Redis. It touches no network
// and is safe for concurrent use; "gateway explain" prints what it returns.
func KeysFor(rule *limiter.Rule, key string) []string {
	if rule == nil || !rule.Algorithm.Shared() {
		return nil
	}
	alg := algorithmOf(rule.Algorithm)
	if alg == nil {
		return nil
	}
	return alg.keyNames(redisBaseKey(rule.Name, digestKey(key)))
}
