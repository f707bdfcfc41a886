package redislimit

import (
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/ratelimit-gateway/gateway/limiter/internal/shardmap"
)

// DefaultDenialCacheSize is the default cap on keys remembered as denied.
const DefaultDenialCacheSize = 100_000

// denialSweepEvery bounds how often a shard is scanned for expired entries,
// so a shard full of live denials does not scan on every insert.
const denialSweepEvery = time.Second

// denialKey is what a denial is remembered for: the policy, the limit that
// applied (a reload that changes it starts afresh) and the key's digest (no
// user bytes are kept).
type denialKey struct {
	policy string
	limit  limiter.Limit
	key    keyDigest
}

// denial says that requests costing cost or more are denied until until.
// The cache trusts it until trust at most: a reservation settled for less,
// here or on another instance, can free the key before until.
type denial struct {
	until   int64 // Unix nanoseconds, by the injected clock
	trust   int64 // min(until, when it was put + maxDenialTrust)
	resetAt int64
	cost    int64
}

// maxDenialTrust bounds how long a cached denial is believed. A denial can be
// undone early (a reservation settled for less than it took, possibly on
// another instance): past this, Redis is asked again, so such a key is never
// refused for longer than this beyond its quota coming back. One call per
// second per denied key keeps the cache's saving under a flood.
const maxDenialTrust = time.Second

// denialCache remembers keys that Redis said are over their limit, so that
// the instance answers 429 for them without asking Redis again until the
// retry time. It holds at most its cap of entries; expired entries are
// dropped on lookup and swept now and then. It is safe for concurrent use.
type denialCache struct {
	m *shardmap.Map[denialKey, denial]
	// refresh is how long one request has to ask Redis again about a
	// denial no longer trusted, while the others go on answering from it.
	refresh time.Duration
}

func newDenialCache(size int, refresh time.Duration) *denialCache {
	if size <= 0 {
		size = DefaultDenialCacheSize
	}
	return &denialCache{m: shardmap.New(shardmap.Config[denialKey, denial]{
		Cap:        size,
		Hash:       func(k denialKey) uint64 { return uint64(k.key[0]) }, // the digest is uniform
		Expired:    func(d denial, now int64) bool { return now >= d.trust },
		Score:      func(d denial) int64 { return d.trust }, // the one expiring first goes first
		SweepEvery: denialSweepEvery,
	}), refresh: refresh}
}

// get returns the live denial for k that covers a request of cost: one
// denied at a smaller cost covers larger ones, not the reverse, because a
// cheaper request may fit where a dearer one did not.
func (c *denialCache) get(k denialKey, cost int64, now time.Time) (denial, bool) {
	d, _, ok := c.lookup(k, cost, func() time.Time { return now })
	return d, ok
}

// lookup is get reading the clock under the shard's lock, and returning the
// instant it read: an entry put while this caller waited for the lock must
// not look longer than it is (its retry counts from when it was put).
func (c *denialCache) lookup(k denialKey, cost int64, clock func() time.Time) (denial, time.Time, bool) {
	sh := c.m.Shard(k)
	sh.Lock()
	defer sh.Unlock()
	now := clock()
	d, ok := sh.Get(k)
	if !ok {
		return denial{}, now, false
	}
	if n := now.UnixNano(); n >= d.trust {
		if n >= d.until || n >= d.trust+int64(c.refresh) {
			// Redis's retry time has come (the key may admit many now: all
			// ask), or nobody refreshed the entry in time.
			sh.Delete(k)
			return denial{}, now, false
		}
		// Trusted no longer, though Redis said denied for longer (the
		// maxDenialTrust cap): one request asks Redis again, and while it
		// does the others keep answering from the denial (Redis's answer
		// replaces it, or an admission forgets it). A flood on a key denied
		// for minutes costs one call per trust period, not one per waiting
		// request.
		d.trust = n + int64(c.refresh)
		sh.Set(k, d, n)
		return denial{}, now, false
	}
	return d, now, cost >= d.cost
}

// put remembers that requests of cost or more are denied for k until until.
func (c *denialCache) put(k denialKey, cost int64, now, until, resetAt time.Time) {
	if !until.After(now) {
		return
	}
	sh := c.m.Shard(k)
	n := now.UnixNano()
	sh.Lock()
	defer sh.Unlock()
	if old, ok := sh.Get(k); ok && n < old.trust && old.cost < cost && old.until >= until.UnixNano() {
		return // the entry already covers more
	}
	trust := min(until.UnixNano(), n+int64(maxDenialTrust))
	sh.Set(k, denial{until: until.UnixNano(), trust: trust, resetAt: resetAt.UnixNano(), cost: cost}, n)
}

// forget drops k: its quota grew (units given back here), so a denial
// remembered for it may no longer hold. Every admitted request asks, and
// nearly always there is nothing to drop: it looks under the read lock first.
func (c *denialCache) forget(k denialKey) {
	sh := c.m.Shard(k)
	sh.RLock()
	_, ok := sh.Get(k)
	sh.RUnlock()
	if !ok {
		return
	}
	sh.Lock()
	sh.Delete(k)
	sh.Unlock()
}

// len counts the entries, live or not yet swept.
func (c *denialCache) len() int { return c.m.Len() }
