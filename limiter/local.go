package limiter

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys is the default cap on buckets per policy and limit.
const DefaultMaxKeys = 100_000

const (
	localShards = 64
	// evictSamples is how many random entries are looked at to find the least
	// recently used one when a full shard needs room (as Redis's approximate LRU).
	evictSamples = 8
	// minSweepEvery bounds how often one shard is swept for idle buckets.
	minSweepEvery = time.Second
)

// Local keeps in-process token buckets (golang.org/x/time/rate) in sharded
// maps with idle expiry and a hard cap on keys per policy and limit, so a flood
// of random keys cannot grow memory without bound. Buckets are grouped by
// (policy name, limit): a reload that keeps a policy's limit keeps its buckets,
// a changed limit starts fresh buckets from the next request.
//
// The zero value is not usable; use NewLocal. Local is safe for concurrent use.
type Local struct {
	maxKeys int
	seed    maphash.Seed

	mu     sync.RWMutex // guards stores; read on every decision, written on a new (policy, limit)
	stores map[storeID]*bucketStore
}

type storeID struct {
	policy string
	limit  Limit
}

// NewLocal returns an empty set of local buckets holding at most maxKeys keys
// per policy and limit; maxKeys <= 0 means DefaultMaxKeys.
func NewLocal(maxKeys int) *Local {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	return &Local{maxKeys: maxKeys, seed: maphash.MakeSeed(), stores: make(map[storeID]*bucketStore)}
}

// Retain drops the buckets of every (policy, limit) for which keep is false.
// It is called after a reload with the limits of the new snapshot.
func (l *Local) Retain(keep func(policy string, lim Limit) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.stores {
		if !keep(id.policy, id.limit) {
			delete(l.stores, id)
		}
	}
}

// Keys returns how many buckets are held for policy at lim.
func (l *Local) Keys(policy string, lim Limit) int {
	l.mu.RLock()
	s := l.stores[storeID{policy, lim}]
	l.mu.RUnlock()
	if s == nil {
		return 0
	}
	return s.len()
}

func (l *Local) store(policy string, lim Limit) *bucketStore {
	id := storeID{policy, lim}
	l.mu.RLock()
	s := l.stores[id]
	l.mu.RUnlock()
	if s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s = l.stores[id]
	if s == nil {
		s = newBucketStore(lim, l.maxKeys, l.seed)
		l.stores[id] = s
	}
	return s
}

// reserve takes c's cost from its bucket at now. When allowed, undo gives the
// tokens back (used when another policy denies the same request).
func (l *Local) reserve(now time.Time, policy string, lim Limit, key string, cost int64) (d Decision, undo func()) {
	d = Decision{Policy: policy, Limit: lim}
	if lim.DenyAll() {
		d.Reason = ReasonDenyAll
		d.RetryAfter = lim.Period
		if d.RetryAfter <= 0 {
			d.RetryAfter = time.Second
		}
		return d, nil
	}
	burst := lim.burst()
	if cost > burst {
		d.Reason = ReasonCostTooHigh
		d.RetryAfter = lim.Period
		return d, nil
	}
	lm := l.store(policy, lim).get(key, now)
	r := lm.ReserveN(now, int(cost))
	if delay := r.DelayFrom(now); delay > 0 {
		r.CancelAt(now)
		d.Reason = ReasonLimited
		d.RetryAfter = delay
		d.ResetAfter = fillTime(lim, lm.TokensAt(now))
		return d, nil
	}
	tokens := lm.TokensAt(now)
	d.Allowed = true
	d.Remaining = int64(math.Max(0, math.Floor(tokens)))
	d.ResetAfter = fillTime(lim, tokens)
	return d, func() { r.CancelAt(now) }
}

func (l Limit) burst() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

func (l Limit) perSecond() rate.Limit {
	return rate.Limit(float64(l.Rate) / l.Period.Seconds())
}

// fillTime is how long a bucket holding tokens takes to be full again.
func fillTime(lim Limit, tokens float64) time.Duration {
	missing := float64(lim.burst()) - tokens
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(lim.perSecond()) * float64(time.Second))
}

// bucketStore is the sharded map of one (policy, limit).
type bucketStore struct {
	lim      Limit
	idle     time.Duration // a bucket idle this long is full again: dropping it changes nothing
	perShard int
	seed     maphash.Seed
	shards   [localShards]shard
}

type shard struct {
	mu        sync.RWMutex
	m         map[string]*bucket
	nextSweep time.Time
}

type bucket struct {
	lim      *rate.Limiter
	lastSeen atomic.Int64 // unix nanoseconds of the last use
}

func newBucketStore(lim Limit, maxKeys int, seed maphash.Seed) *bucketStore {
	s := &bucketStore{
		lim:      lim,
		idle:     fillTime(lim, 0),
		perShard: max(1, (maxKeys+localShards-1)/localShards),
		seed:     seed,
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*bucket)
	}
	return s
}

func (s *bucketStore) len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

func (s *bucketStore) get(key string, now time.Time) *rate.Limiter {
	sh := &s.shards[maphash.String(s.seed, key)%localShards]
	sh.mu.RLock()
	b := sh.m[key]
	sh.mu.RUnlock()
	if b == nil {
		sh.mu.Lock()
		if b = sh.m[key]; b == nil {
			s.makeRoom(sh, now)
			b = &bucket{lim: rate.NewLimiter(s.lim.perSecond(), int(s.lim.burst()))}
			sh.m[key] = b
		}
		sh.mu.Unlock()
	}
	b.lastSeen.Store(now.UnixNano())
	return b.lim
}

// makeRoom sweeps idle buckets now and then and, when the shard is still at
// its cap, evicts the least recently used of a few random buckets.
// The caller holds sh.mu.
func (s *bucketStore) makeRoom(sh *shard, now time.Time) {
	if !now.Before(sh.nextSweep) {
		cutoff := now.Add(-s.idle).UnixNano()
		for k, b := range sh.m {
			if b.lastSeen.Load() <= cutoff {
				delete(sh.m, k)
			}
		}
		sh.nextSweep = now.Add(max(s.idle, minSweepEvery))
	}
	evictSampled(sh.m, s.perShard, func(b *bucket) int64 { return b.lastSeen.Load() })
}
