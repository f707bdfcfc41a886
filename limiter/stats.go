package limiter

import (
	"maps"
	"slices"
	"sync/atomic"
)

// LocalStats describe the in-process buckets and slots, for metrics and
// tests. The zero value means nothing is held and nothing was dropped.
type LocalStats struct {
	// Buckets is how many token buckets are kept now, across every policy
	// and limit (the local failure mode's included). It counts buckets
	// that are idle but not yet swept.
	Buckets int
	// Evictions counts buckets dropped, since the Local was created, to stay
	// under the cap on keys (server.max_keys_per_policy): a client's bucket
	// forgotten while it may still have been in use, so a sign that the cap
	// is too low or that keys are being sprayed.
	Evictions uint64
	// Expired counts idle buckets swept since the Local was created. An idle
	// bucket is full again, so dropping it changes nothing.
	Expired uint64
	// SlotKeys is how many keys have requests in flight now (concurrency
	// policies).
	SlotKeys int
	// SlotEvictions counts keys whose requests in flight were forgotten to
	// stay under the cap: each lets that key admit more than its limit.
	SlotEvictions uint64
}

// localCounters are what Stats cannot read from the maps: what they
// dropped. They live in the Local, not in each store, so that a store
// dropped by Retain takes nothing back from the totals.
type localCounters struct {
	evictions, expired, slotEvictions atomic.Uint64
}

// Stats returns a snapshot of the buckets and slots. It locks each shard of
// each store in turn, so it is meant for a scrape, not for every request.
// It is safe for concurrent use.
func (l *Local) Stats() LocalStats {
	stores := slices.Collect(maps.Values(l.bucketStores()))
	l.mu.RLock()
	slots := make([]*slotStore, 0, len(l.slotStores))
	for _, s := range l.slotStores {
		slots = append(slots, s)
	}
	l.mu.RUnlock()

	st := LocalStats{
		Evictions:     l.counters.evictions.Load(),
		Expired:       l.counters.expired.Load(),
		SlotEvictions: l.counters.slotEvictions.Load(),
	}
	for _, s := range stores {
		st.Buckets += s.len()
	}
	for _, s := range slots {
		st.SlotKeys += s.m.Len()
	}
	return st
}
