package limiter

import (
	"sync"
	"time"
)

// DefaultDenialCacheSize is the default cap on keys remembered as denied.
const DefaultDenialCacheSize = 100_000

const (
	denialShards = 64
	// denialSweepEvery bounds how often a full shard is scanned for expired
	// entries, so a shard full of live denials does not scan on every insert.
	denialSweepEvery = time.Second
)

// denialKey is what a denial is remembered for: the policy, the limit that
// applied (a reload that changes it starts afresh) and the key's digest (no
// user bytes are kept).
type denialKey struct {
	policy string
	limit  Limit
	key    keyDigest
}

// denial says that requests costing cost or more are denied until until.
type denial struct {
	until   int64 // Unix nanoseconds, by the injected clock
	resetAt int64
	cost    int64
}

// denialCache remembers keys that Redis said are over their limit, so that
// the instance answers 429 for them without asking Redis again until the
// retry time. It holds at most its cap of entries in sharded maps; expired
// entries are dropped on lookup and when a full shard is swept. It is safe for
// concurrent use; each shard's mutex guards its map.
type denialCache struct {
	perShard int
	shards   [denialShards]denialShard
}

type denialShard struct {
	mu        sync.Mutex
	m         map[denialKey]denial
	nextSweep int64
}

func newDenialCache(size int) *denialCache {
	if size <= 0 {
		size = DefaultDenialCacheSize
	}
	c := &denialCache{perShard: max(1, (size+denialShards-1)/denialShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[denialKey]denial)
	}
	return c
}

func (c *denialCache) shard(k denialKey) *denialShard {
	return &c.shards[int(k.key[0])%denialShards] // the digest is uniform
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
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := clock()
	d, ok := c.find(sh, k, cost, now.UnixNano())
	return d, now, ok
}

// find must be called with sh.mu held.
func (c *denialCache) find(sh *denialShard, k denialKey, cost int64, n int64) (denial, bool) {
	d, ok := sh.m[k]
	if !ok {
		return denial{}, false
	}
	if n >= d.until {
		delete(sh.m, k)
		return denial{}, false
	}
	return d, cost >= d.cost
}

// put remembers that requests of cost or more are denied for k until until.
func (c *denialCache) put(k denialKey, cost int64, now, until, resetAt time.Time) {
	if !until.After(now) {
		return
	}
	sh := c.shard(k)
	n := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[k]; ok && n < old.until && old.cost < cost && old.until >= until.UnixNano() {
		return // the entry already covers more
	}
	if _, ok := sh.m[k]; !ok && len(sh.m) >= c.perShard {
		sh.makeRoom(n, c.perShard)
	}
	sh.m[k] = denial{until: until.UnixNano(), resetAt: resetAt.UnixNano(), cost: cost}
}

// makeRoom drops expired entries (at most once per denialSweepEvery) and,
// if the shard is still full, the entry expiring first among a few random
// ones. The caller holds sh.mu.
func (sh *denialShard) makeRoom(now int64, limit int) {
	if now >= sh.nextSweep {
		for k, d := range sh.m {
			if now >= d.until {
				delete(sh.m, k)
			}
		}
		sh.nextSweep = now + int64(denialSweepEvery)
	}
	evictSampled(sh.m, limit, func(d denial) int64 { return d.until })
}

// len counts the entries, live or not yet swept.
func (c *denialCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
