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
	k1, k2, n := algorithmKeys(rule.Algorithm, redisBaseKey(rule.Name, digestKey(key)))
	switch n {
	case 1:
		return []string{k1}
	case 2:
		return []string{k1, k2}
	}
	return nil
}

// algorithmKeys names the n keys (1 or 2; 0 for an algorithm that keeps no
// state in Redis) that a check of alg on the base key reads and writes, in
// the order decideScript takes them.
func algorithmKeys(alg limiter.Algorithm, base string) (k1, k2 string, n int) {
	switch alg {
	case limiter.GCRA:
		return gcraKeyPrefix + base, "", 1
	case limiter.SlidingWindow:
		return base + slidingLogSuffix, base + slidingSumSuffix, 2
	case limiter.FixedWindow:
		return base + fixedSuffix, "", 1
	case limiter.SharedConcurrency:
		return base + concurrencySuffix, "", 1
	}
	return "", "", 0
}
