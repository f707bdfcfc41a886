package limiter

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter/internal/shardmap"
)

// DefaultMaxKeys is the default cap on buckets per policy and limit.
const DefaultMaxKeys = 100_000

// minSweepEvery bounds how often one shard is swept for idle buckets.
const minSweepEvery = time.Second

// Local keeps in-process token buckets in sharded
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

// reserve takes cost from key's bucket at now. When allowed, undo gives the
// tokens back exactly (used when another policy denies the same request). A
// denied request changes nothing.
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
	if cost > lim.burst() {
		d.Reason = ReasonCostTooHigh
		d.RetryAfter = lim.Period
		return d, nil
	}
	b := l.store(policy, lim).get(key, now)
	g := b.take(now, lim, cost)
	d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter = g.allowed, g.remaining, g.resetAfter, g.retryAfter
	if !g.allowed {
		d.Reason = ReasonLimited
		d.Remaining = 0
		return d, nil
	}
	return d, func() { b.give(g.increment) }
}

func (l Limit) burst() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// emission is the time one token takes to come back, in nanoseconds.
func (l Limit) emission() float64 { return float64(l.Period) / float64(l.Rate) }

// fillTime is how long an empty bucket takes to be full again.
func fillTime(lim Limit) time.Duration {
	return time.Duration(lim.emission() * float64(lim.burst()))
}

// bucket is one key's token bucket, kept as GCRA state: tat is the instant
// at which the bucket is full again, so taking n tokens moves it forward by n
// emissions and giving them back moves it back by as much, exactly, whatever
// happened in between. (x/time/rate's reservations cannot do that: CancelAt
// restores less once later reservations exist, and nothing after their time.)
// mu guards tat and last.
type bucket struct {
	mu       sync.Mutex
	tat      int64        // Unix ns; at or before now means full
	last     int64        // the latest instant seen: time never runs backwards here
	lastSeen atomic.Int64 // as last, readable without mu by idle sweeps and eviction
}

// grant is the outcome of one take.
type grant struct {
	allowed    bool
	remaining  int64
	resetAfter time.Duration
	retryAfter time.Duration
	increment  int64 // ns the take moved tat forward, for give
}

// take admits cost tokens at now if the bucket holds them. An instant older
// than one already seen (read before waiting for mu, while a later one got
// here first) counts as that later instant, so no token is granted twice.
func (b *bucket) take(now time.Time, lim Limit, cost int64) grant {
	emission := lim.emission()
	inc := saturatingNanos(emission * float64(cost))
	tolerance := saturatingNanos(emission * float64(lim.burst()))

	b.mu.Lock()
	defer b.mu.Unlock()
	t := max(now.UnixNano(), b.last)
	b.last = t
	b.lastSeen.Store(t)
	tat := max(b.tat, t)
	newTAT := tat + inc
	if allowAt := newTAT - tolerance; t < allowAt {
		return grant{retryAfter: time.Duration(allowAt - t), resetAfter: time.Duration(tat - t)}
	}
	b.tat = newTAT
	// The epsilon keeps 2.9999999 tokens (float emission) at 3.
	left := math.Floor(float64(t+tolerance-newTAT)/emission + 1e-6)
	return grant{
		allowed:    true,
		remaining:  int64(min(max(0, left), float64(lim.burst()))),
		resetAfter: time.Duration(newTAT - t),
		increment:  inc,
	}
}

// give returns what a take consumed.
func (b *bucket) give(increment int64) {
	b.mu.Lock()
	b.tat -= increment
	b.mu.Unlock()
}

func saturatingNanos(f float64) int64 {
	if f >= math.MaxInt64/4 {
		return math.MaxInt64 / 4 // far beyond any period; leaves room for additions
	}
	return int64(math.Round(f))
}

// bucketStore holds the buckets of one (policy, limit).
type bucketStore struct {
	lim  Limit
	idle time.Duration // a bucket idle this long is full again: dropping it changes nothing
	m    *shardmap.Map[string, *bucket]
}

func newBucketStore(lim Limit, maxKeys int, seed maphash.Seed) *bucketStore {
	idle := fillTime(lim)
	return &bucketStore{lim: lim, idle: idle, m: shardmap.New(shardmap.Config[string, *bucket]{
		Cap:        maxKeys,
		Hash:       func(k string) uint64 { return maphash.String(seed, k) },
		Expired:    func(b *bucket, now int64) bool { return b.lastSeen.Load() <= now-int64(idle) },
		Score:      func(b *bucket) int64 { return b.lastSeen.Load() },
		SweepEvery: max(idle, minSweepEvery),
	})}
}

func (s *bucketStore) len() int { return s.m.Len() }

func (s *bucketStore) get(key string, now time.Time) *bucket {
	sh := s.m.Shard(key)
	sh.RLock()
	b, ok := sh.Get(key)
	sh.RUnlock()
	if ok {
		return b
	}
	sh.Lock()
	defer sh.Unlock()
	if b, ok = sh.Get(key); !ok {
		b = &bucket{}
		b.lastSeen.Store(now.UnixNano())
		sh.Set(key, b, now.UnixNano())
	}
	return b
}
