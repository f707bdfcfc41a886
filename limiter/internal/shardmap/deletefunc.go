package shardmap

// DeleteFunc drops every entry for which del is true, locking each shard in
// turn, and returns how many it dropped. It visits every entry: it is for
// rare operations (an operator resetting a key), not the request path.
func (m *Map[K, V]) DeleteFunc(del func(K, V) bool) int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.Lock()
		for k, v := range s.m {
			if del(k, v) {
				delete(s.m, k)
				n++
			}
		}
		s.Unlock()
	}
	return n
}
