package topk

// summary is a space-saving summary of capacity k for one window: the k
// keys with the largest estimated counts. A kept key's count goes up in
// O(1); a new key, once the summary is full, replaces the smallest count,
// found by a scan of k counts (k is small, and a scan of one slice beats a
// heap whose every step rewrites map entries). Its memory is fixed once
// full. It is not safe for concurrent use (its shard's lock guards it).
type summary struct {
	epoch int64
	k     int
	items []item
	index map[string]int // key → position in items
}

type item struct {
	key   string
	count uint64
	err   uint64 // the count the key inherited when it replaced another
}

func newSummary(k int) summary {
	return summary{epoch: -1, k: k, items: make([]item, 0, k), index: make(map[string]int, k)}
}

// reset empties the summary for the window of epoch, keeping its memory.
func (s *summary) reset(epoch int64) {
	s.epoch = epoch
	s.items = s.items[:0]
	clear(s.index)
}

// add counts one occurrence of key.
func (s *summary) add(key string) {
	if i, ok := s.index[key]; ok {
		s.items[i].count++
		return
	}
	if len(s.items) < s.k {
		s.index[key] = len(s.items)
		s.items = append(s.items, item{key: key, count: 1})
		return
	}
	// Full: the new key takes the smallest count's place and inherits it,
	// so its count is never below its true count.
	m := 0
	for i := 1; i < len(s.items); i++ {
		if s.items[i].count < s.items[m].count {
			m = i
		}
	}
	old := s.items[m]
	delete(s.index, old.key)
	s.items[m] = item{key: key, count: old.count + 1, err: old.count}
	s.index[key] = m
}
