package limiter

// evictSampled deletes entries from m until it holds fewer than limit: each
// time the one with the lowest score among evictSamples random entries (map
// iteration order is random), as Redis's approximate LRU does. It keeps a
// full map O(1) per insertion where an exact LRU would need a list.
func evictSampled[K comparable, V any](m map[K]V, limit int, score func(V) int64) {
	for len(m) >= limit && len(m) > 0 {
		var victim K
		var lowest int64
		n := 0
		for k, v := range m {
			if s := score(v); n == 0 || s < lowest {
				victim, lowest = k, s
			}
			if n++; n == evictSamples {
				break
			}
		}
		delete(m, victim)
	}
}
