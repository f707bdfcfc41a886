package shardmap

import (
	"strconv"
	"testing"
	"time"
)

type entry struct{ seen, until int64 }

func newTestMap(capacity int) *Map[int, entry] {
	return New(Config[int, entry]{
		Cap:        capacity,
		Hash:       func(k int) uint64 { return uint64(k) },
		Expired:    func(e entry, now int64) bool { return now >= e.until },
		Score:      func(e entry) int64 { return e.seen },
		SweepEvery: time.Second,
	})
}

func set(m *Map[int, entry], k int, e entry, now int64) {
	sh := m.Shard(k)
	sh.Lock()
	sh.Set(k, e, now)
	sh.Unlock()
}

func TestCapEvictsTheLeastRecentlySeenOfASample(t *testing.T) {
	const capacity = 4 * Shards
	m := newTestMap(capacity)
	for k := range 100 * capacity {
		set(m, k, entry{seen: int64(k), until: 1 << 62}, 0)
	}
	if n := m.Len(); n > capacity {
		t.Fatalf("got %d entries, want at most %d", n, capacity)
	}
	// The newest key of each shard survives: it is never the lowest score
	// among those sampled while it is the latest.
	last := 100*capacity - 1
	sh := m.Shard(last)
	sh.RLock()
	_, ok := sh.Get(last)
	sh.RUnlock()
	if !ok {
		t.Fatalf("the key set last was evicted, want it kept")
	}
}

func TestExpiredEntriesAreSweptOnInsert(t *testing.T) {
	m := newTestMap(1000 * Shards)
	for k := range 10 * Shards {
		set(m, k, entry{until: 10}, 0)
	}
	// Every shard takes a new key after expiry: its expired entries go.
	for k := range Shards {
		set(m, 1_000_000+k, entry{until: 1 << 62}, int64(time.Second))
	}
	if n := m.Len(); n != Shards {
		t.Fatalf("got %d entries, want %d: only the live ones (%s)", n, Shards, strconv.Itoa(Shards))
	}
}
