// Package shardmap is the bounded, sharded map behind the limiter's local
// buckets and the Redis backend's denial cache: many goroutines, one lock per
// shard, a hard cap on entries, expired entries swept now and then, and an
// approximate LRU (as Redis's) when a shard is full. It is hand-written
// because sync.Map and the LRU libraries give no per-shard locking with a
// hard cap, idle expiry and eviction callbacks together.
package shardmap

import (
	"sync"
	"time"
)

// Shards is the number of shards of every Map.
const Shards = 64

// evictSamples is how many random entries are looked at to find the one to
// evict when a full shard needs room.
const evictSamples = 8

// Config says how a Map hashes, expires and evicts. Hash, Expired and Score
// are required.
type Config[K comparable, V any] struct {
	// Cap bounds the entries of the whole map (spread over the shards);
	// values below 1 mean one entry per shard.
	Cap int
	// Hash spreads keys over the shards.
	Hash func(K) uint64
	// Expired reports whether v may be dropped at now (Unix ns).
	Expired func(v V, now int64) bool
	// Score ranks entries for eviction: the lowest goes first.
	Score func(V) int64
	// SweepEvery bounds how often one shard is scanned for expired entries.
	SweepEvery time.Duration
	// OnEvict, when not nil, is called once per entry evicted to stay under
	// Cap, and OnExpire once per expired entry swept, with the shard's lock
	// held: they must be cheap (a counter). Deletes by the caller call
	// neither.
	OnEvict, OnExpire func()
}

// Map is a map in Shards shards, each guarded by its own lock. Callers take
// a key's Shard, lock it, and use its methods. The zero value is not usable;
// use New. It is safe for concurrent use under those locks.
type Map[K comparable, V any] struct {
	cfg      Config[K, V]
	perShard int
	shards   [Shards]Shard[K, V]
}

// Shard is one part of a Map. Its methods must be called with its lock
// held (Get under RLock or Lock; Set and Delete under Lock).
type Shard[K comparable, V any] struct {
	sync.RWMutex
	owner     *Map[K, V]
	m         map[K]V
	nextSweep int64
}

// New returns an empty Map.
func New[K comparable, V any](cfg Config[K, V]) *Map[K, V] {
	m := &Map[K, V]{cfg: cfg, perShard: max(1, (cfg.Cap+Shards-1)/Shards)}
	for i := range m.shards {
		m.shards[i].owner = m
		m.shards[i].m = make(map[K]V)
	}
	return m
}

// Shard returns the shard that holds k.
func (m *Map[K, V]) Shard(k K) *Shard[K, V] { return &m.shards[m.cfg.Hash(k)%Shards] }

// Len counts the entries, expired or not yet swept. It locks each shard in
// turn.
func (m *Map[K, V]) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.RLock()
		n += len(s.m)
		s.RUnlock()
	}
	return n
}

// Get returns k's value.
func (s *Shard[K, V]) Get(k K) (V, bool) {
	v, ok := s.m[k]
	return v, ok
}

// Delete drops k.
func (s *Shard[K, V]) Delete(k K) { delete(s.m, k) }

// Set stores v under k. A new key first makes room: expired entries are
// swept (at most once per SweepEvery), and while the shard is at its cap the
// lowest-scored of a few random entries (map order is random) is evicted, so
// a full shard costs O(1) per insertion where an exact LRU would need a list.
func (s *Shard[K, V]) Set(k K, v V, now int64) {
	if _, ok := s.m[k]; !ok {
		s.makeRoom(now)
	}
	s.m[k] = v
}

func (s *Shard[K, V]) makeRoom(now int64) {
	cfg := &s.owner.cfg
	if now >= s.nextSweep {
		for k, v := range s.m {
			if cfg.Expired(v, now) {
				delete(s.m, k)
				if cfg.OnExpire != nil {
					cfg.OnExpire()
				}
			}
		}
		s.nextSweep = now + int64(cfg.SweepEvery)
	}
	for len(s.m) >= s.owner.perShard && len(s.m) > 0 {
		var victim K
		var lowest int64
		n := 0
		for k, v := range s.m {
			if sc := cfg.Score(v); n == 0 || sc < lowest {
				victim, lowest = k, sc
			}
			if n++; n == evictSamples {
				break
			}
		}
		delete(s.m, victim)
		if cfg.OnEvict != nil {
			cfg.OnEvict()
		}
	}
}
