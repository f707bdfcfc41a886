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
	base := redisBaseKey(rule.Name, digestKey(key))
	switch rule.Algorithm {
	case limiter.GCRA:
		return []string{gcraKeyPrefix + base}
	case limiter.SlidingWindow:
		return []string{base + slidingLogSuffix, base + slidingSumSuffix}
	case limiter.FixedWindow:
		return []string{base + fixedSuffix}
	case limiter.SharedConcurrency:
		return []string{base + concurrencySuffix}
	}
	return nil
}
