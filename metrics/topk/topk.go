// Package topk keeps, per policy, the keys it refused most over the last
// minutes, in fixed memory: a space-saving summary per window of time, so
// that a flood of distinct keys replaces the smallest counts instead of
// growing a map. It answers what an operator asks during an incident
// ("who is being limited, right now") without a client-chosen label in
// Prometheus.
//
// Counts are per instance: each gateway sees only what it refused. The
// fleet's view is Prometheus's, by policy.
package topk

import (
	"cmp"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config sizes a Set. The zero value of each field takes its default.
type Config struct {
	// K is how many keys each summary keeps (default 32). Any key refused
	// more often than 1/K of its shard's refusals in a window is kept.
	K int
	// Window is the length of one window of counts (default 1m).
	Window time.Duration
	// Windows is how many windows Top adds up, the current one included
	// (default 5): counts cover the last (Windows-1)×Window to
	// Windows×Window.
	Windows int
	// Shards spreads each policy's keys over this many summaries with their
	// own locks (default 4), so concurrent refusals rarely wait.
	Shards int
	// MaxPolicies bounds the policies a Set tracks (default 1024); a
	// policy past it is not tracked. Policy names come from the config.
	MaxPolicies int
}

func (c Config) withDefaults() Config {
	if c.K <= 0 {
		c.K = 32
	}
	if c.Window <= 0 {
		c.Window = time.Minute
	}
	if c.Windows <= 0 {
		c.Windows = 5
	}
	if c.Shards <= 0 {
		c.Shards = 4
	}
	if c.MaxPolicies <= 0 {
		c.MaxPolicies = 1024
	}
	return c
}

// Entry is one key's estimated refusals over the windows Top covers.
type Entry struct {
	Key string
	// Count over-estimates the key's refusals by at most Error: the true
	// count is in [Count-Error, Count] for the windows the key was kept
	// in. A key dropped from a window and seen again starts that window
	// over at the smallest count it displaced (the Error).
	Count uint64
	Error uint64
}

// Set keeps a summary per policy. It is safe for concurrent use; the zero
// value is not usable (see New).
type Set struct {
	cfg   Config
	clock func() time.Time
	seed  maphash.Seed

	policies atomic.Pointer[map[string]*policySketch] // read without a lock
	mu       sync.Mutex                               // guards replacing policies
}

// New returns an empty Set sized by cfg, reading time from clock (required).
func New(cfg Config, clock func() time.Time) (*Set, error) {
	if clock == nil {
		return nil, errors.New("creating top-k set: nil clock")
	}
	s := &Set{cfg: cfg.withDefaults(), clock: clock, seed: maphash.MakeSeed()}
	s.policies.Store(&map[string]*policySketch{})
	return s, nil
}

// Window returns the span Top covers at most: Windows × Window.
func (s *Set) Window() time.Duration {
	return time.Duration(s.cfg.Windows) * s.cfg.Window
}

// K returns how many keys Top returns at most.
func (s *Set) K() int { return s.cfg.K }

// Refused counts one refusal of key by policy. It is the request path's
// hook: one clock read, one hash, one short lock of one shard; no
// allocation once the key is kept.
func (s *Set) Refused(policy, key string) {
	ps := s.policy(policy)
	if ps == nil {
		return
	}
	epoch := s.clock().UnixNano() / int64(s.cfg.Window)
	sh := &ps.shards[maphash.String(s.seed, key)%uint64(len(ps.shards))]
	sh.mu.Lock()
	w := &sh.windows[uint64(epoch)%uint64(len(sh.windows))]
	if w.epoch < epoch { // never back: a late caller counts into the newer window
		w.reset(epoch)
	}
	w.add(key)
	sh.mu.Unlock()
}

// Top returns policy's most refused keys over the last windows, most
// refused first (ties by key), at most K; nil for a policy that refused
// nothing.
func (s *Set) Top(policy string) []Entry {
	ps := (*s.policies.Load())[policy]
	if ps == nil {
		return nil
	}
	now := s.clock().UnixNano() / int64(s.cfg.Window)
	var all []Entry
	for i := range ps.shards {
		sh := &ps.shards[i]
		merged := map[string]Entry{}
		sh.mu.Lock()
		for j := range sh.windows {
			w := &sh.windows[j]
			if w.epoch > now || now-w.epoch >= int64(s.cfg.Windows) || len(w.items) == 0 {
				continue
			}
			for _, it := range w.items {
				e := merged[it.key]
				e.Key, e.Count, e.Error = it.key, e.Count+it.count, e.Error+it.err
				merged[it.key] = e
			}
		}
		sh.mu.Unlock()
		for _, e := range merged {
			all = append(all, e)
		}
	}
	slices.SortFunc(all, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if len(all) > s.cfg.K {
		all = all[:s.cfg.K]
	}
	return all
}

// Policies returns the policies with a summary, sorted.
func (s *Set) Policies() []string {
	m := *s.policies.Load()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Retain drops the summaries of policies keep rejects (call it after a
// reload with the policies in force).
func (s *Set) Retain(keep func(policy string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.policies.Load()
	next := make(map[string]*policySketch, len(old))
	for n, ps := range old {
		if keep(n) {
			next[n] = ps
		}
	}
	s.policies.Store(&next)
}

// Keys returns how many keys the Set holds across every policy, shard and
// window: at most policies × Shards × Windows × K.
func (s *Set) Keys() int {
	n := 0
	for _, ps := range *s.policies.Load() {
		for i := range ps.shards {
			sh := &ps.shards[i]
			sh.mu.Lock()
			for j := range sh.windows {
				n += len(sh.windows[j].items)
			}
			sh.mu.Unlock()
		}
	}
	return n
}

// policy returns policy's sketch, made on first use; nil past MaxPolicies.
func (s *Set) policy(name string) *policySketch {
	if ps, ok := (*s.policies.Load())[name]; ok {
		return ps
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.policies.Load()
	if ps, ok := old[name]; ok {
		return ps
	}
	if len(old) >= s.cfg.MaxPolicies {
		return nil
	}
	ps := &policySketch{shards: make([]shard, s.cfg.Shards)}
	for i := range ps.shards {
		ps.shards[i].windows = make([]summary, s.cfg.Windows)
		for j := range ps.shards[i].windows {
			ps.shards[i].windows[j] = newSummary(s.cfg.K)
		}
	}
	next := make(map[string]*policySketch, len(old)+1)
	for n, p := range old {
		next[n] = p
	}
	next[name] = ps
	s.policies.Store(&next)
	return ps
}

type policySketch struct {
	shards []shard
}

// shard is one policy's summaries of the keys that hash to it, one per
// window, reused in turn: the window of epoch e lives at e mod Windows.
type shard struct {
	mu      sync.Mutex
	windows []summary
}
