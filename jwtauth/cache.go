package jwtauth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// DefaultMaxCached bounds the verified tokens kept (a few hundred bytes
// each).
const DefaultMaxCached = 10000

// entry is a verified token: its claims, the key that verified it (it
// leaves when that key leaves the set), its alg and its exp.
type entry struct {
	claims Claims
	key    *key
	alg    string
	// exp, nbf (zero: none), iss and aud are read once, when verified.
	exp, nbf time.Time
	iss      string
	aud      []string
}

// cache keeps verified tokens by their SHA-256, at most max of them. It is
// safe for concurrent use.
type cache struct {
	mu  sync.RWMutex
	max int
	m   map[[32]byte]*entry
}

func newCache(max int) *cache { return &cache{max: max, m: make(map[[32]byte]*entry)} }

func (c *cache) get(sum [32]byte) (*entry, bool) {
	c.mu.RLock()
	e, ok := c.m[sum]
	c.mu.RUnlock()
	return e, ok
}

func (c *cache) drop(sum [32]byte) {
	c.mu.Lock()
	delete(c.m, sum)
	c.mu.Unlock()
}

// put keeps e; when full, expired entries go first, then arbitrary ones
// (map order), so the cache never grows past max.
func (c *cache) put(sum [32]byte, e *entry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for s, old := range c.m {
			if !now.Before(old.exp) {
				delete(c.m, s)
			}
		}
		for s := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, s)
		}
	}
	c.m[sum] = e
}

func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

func sha(raw string) [32]byte { return sha256.Sum256([]byte(raw)) }
