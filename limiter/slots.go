package limiter

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter/internal/shardmap"
)

// SlotRetryAfter is the Retry-After of a request refused because every slot
// of its key is taken: slots come back whenever a request ends, so there is
// no better guess than "soon".
const SlotRetryAfter = time.Second

// slotGroup names the slots of one policy. Unlike buckets they are not
// split by limit: the count of requests in flight stays true across a
// reload that changes the limit, and the new limit applies to it at once.
type slotGroup struct {
	policy   string
	fallback bool
}

// slotStore counts, per key, the requests of one policy in flight. A key
// whose count drops to zero is deleted at once, so the map holds only keys
// with requests in flight; the cap (DefaultMaxKeys) can only be reached by
// that many keys holding slots at the same time, and then the key held the
// longest loses its count (an over-admission, never a leak).
type slotStore struct {
	m *shardmap.Map[string, *slotCount]
}

// slotCount is one key's requests in flight. n is changed under the
// shard's lock; it is atomic so eviction may read it under a read lock.
type slotCount struct {
	n     atomic.Int64
	since int64 // Unix ns of the entry's creation: eviction ranks by it
}

func newSlotStore(maxKeys int, seed maphash.Seed, c *localCounters) *slotStore {
	return &slotStore{m: shardmap.New(shardmap.Config[string, *slotCount]{
		Cap:        maxKeys,
		Hash:       func(k string) uint64 { return maphash.String(seed, k) },
		Expired:    func(c *slotCount, _ int64) bool { return c.n.Load() <= 0 },
		Score:      func(c *slotCount) int64 { return c.since },
		SweepEvery: time.Hour, // little to sweep: empty entries are deleted at once
		OnEvict:    func() { c.slotEvictions.Add(1) },
	})}
}

// acquire takes one of limit slots of key, or reports how many are held.
func (s *slotStore) acquire(key string, limit int64, now time.Time) (c *slotCount, held int64, ok bool) {
	sh := s.m.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	c, found := sh.Get(key)
	if found {
		held = c.n.Load()
	}
	if held >= limit {
		return nil, held, false
	}
	if !found {
		c = &slotCount{since: now.UnixNano()}
		sh.Set(key, c, now.UnixNano())
	}
	c.n.Add(1)
	return c, held + 1, true
}

// release gives back one slot of key taken as c. A count evicted meanwhile
// is no longer in the map; its release changes nothing there.
func (s *slotStore) release(key string, c *slotCount) {
	sh := s.m.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	if c.n.Add(-1) <= 0 {
		if cur, ok := sh.Get(key); ok && cur == c {
			sh.Delete(key)
		}
	}
}

// held returns how many slots of key are taken.
func (s *slotStore) held(key string) int64 {
	sh := s.m.Shard(key)
	sh.RLock()
	defer sh.RUnlock()
	if c, ok := sh.Get(key); ok {
		return c.n.Load()
	}
	return 0
}

func (l *Local) slots(g BucketGroup) *slotStore {
	sg := slotGroup{policy: g.Policy, fallback: g.Fallback}
	l.mu.RLock()
	s := l.slotStores[sg]
	l.mu.RUnlock()
	if s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s = l.slotStores[sg]
	if s == nil {
		s = newSlotStore(l.maxKeys, l.seed, &l.counters)
		l.slotStores[sg] = s
	}
	return s
}

// acquireSlot is reserve for an InFlight group: one of the limit's Quota
// slots, held until t is released.
func (l *Local) acquireSlot(now time.Time, g BucketGroup, key string, t *localTake) Decision {
	limit := g.Limit.Quota()
	s := l.slots(g)
	c, held, ok := s.acquire(key, limit, now)
	d := Decision{Policy: g.Policy, Limit: g.Limit, Allowed: ok, Remaining: max(limit-held, 0)}
	if !ok {
		d.Reason, d.RetryAfter, d.Remaining = ReasonLimited, SlotRetryAfter, 0
		return d
	}
	t.slot, t.slots, t.key, t.lim, t.units = c, s, key, g.Limit, 1
	return d
}

// peekSlot reports key's free slots in g.
func (l *Local) peekSlot(g BucketGroup, key string) Decision {
	limit := g.Limit.Quota()
	held := l.slots(g).held(key)
	d := Decision{Policy: g.Policy, Limit: g.Limit, Allowed: held < limit, Remaining: max(limit-held, 0)}
	if !d.Allowed {
		d.Reason, d.RetryAfter = ReasonLimited, SlotRetryAfter
	}
	return d
}
