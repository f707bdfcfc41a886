package shardmap

import "testing"

// DeleteFunc drops exactly the entries it is asked to, in every shard.
func TestDeleteFunc(t *testing.T) {
	m := newTestMap(1000 * Shards)
	for k := range 10 * Shards {
		set(m, k, entry{seen: int64(k), until: 1 << 62}, 0)
	}
	if got, want := m.DeleteFunc(func(k int, _ entry) bool { return k%2 == 0 }), 5*Shards; got != want {
		t.Fatalf("dropped: got %d, want %d", got, want)
	}
	if got, want := m.Len(), 5*Shards; got != want {
		t.Fatalf("left: got %d entries, want %d", got, want)
	}
	for k := range 10 * Shards {
		sh := m.Shard(k)
		sh.RLock()
		_, ok := sh.Get(k)
		sh.RUnlock()
		if ok != (k%2 == 1) {
			t.Fatalf("key %d: present %v, want %v", k, ok, k%2 == 1)
		}
	}
}
