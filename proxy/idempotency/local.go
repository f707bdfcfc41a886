package idempotency

import (
	"context"
	"slices"
	"sync"
	"time"
)

// DefaultMaxKeys bounds a Local store when NewLocal is given zero.
const DefaultMaxKeys = 100_000

// Local keeps idempotency keys in the process: the same behaviour as Redis
// for one instance. A hold lasts as long as its request (the process is the
// holder, so there is nothing to renew); records expire after their replay
// TTL. Memory is bounded: at maxKeys, expired records go first, then the
// records closest to expiry.
type Local struct {
	now     func() time.Time
	maxKeys int

	mu      sync.Mutex
	entries map[string]*localEntry
	fence   int64
}

var _ Store = (*Local)(nil)

type localEntry struct {
	key     string
	hold    *localHold    // the current holder; nil once it ended
	done    chan struct{} // closed when hold ends
	rec     *Record
	expires time.Time // of rec
}

// NewLocal returns an empty store that reads time from now and keeps at most
// maxKeys keys (DefaultMaxKeys when zero). It starts nothing.
func NewLocal(now func() time.Time, maxKeys int) *Local {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	// Fencing tokens start at the start time in microseconds: a restarted
	// gateway hands out larger tokens than the run before it did.
	return &Local{now: now, maxKeys: maxKeys, entries: map[string]*localEntry{}, fence: now().UnixMicro()}
}

// Begin claims key. t.LockTTL does not apply: a local hold ends with its
// request.
func (s *Local) Begin(_ context.Context, key string, t Terms) (Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.entries[key]
	switch {
	case e != nil && e.hold != nil:
		return Claim{}, nil
	case e != nil && e.rec != nil && now.Before(e.expires):
		return Claim{Record: e.rec}, nil
	case e == nil && len(s.entries) >= s.maxKeys && !s.makeRoom(now):
		return Claim{}, ErrFull
	}
	s.fence++
	h := &localHold{store: s, key: key, fence: s.fence, replayTTL: t.ReplayTTL}
	s.entries[key] = &localEntry{key: key, hold: h, done: make(chan struct{})}
	return Claim{Hold: h}, nil
}

// Wait returns when key's holder ends or ctx does.
func (s *Local) Wait(ctx context.Context, key string) error {
	s.mu.Lock()
	e := s.entries[key]
	var done chan struct{}
	if e != nil && e.hold != nil {
		done = e.done
	}
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Len returns the number of keys held or recorded (tests, metrics).
func (s *Local) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// makeRoom drops expired records and, if that frees nothing, the sixteenth
// of the records closest to expiry; keys being held are never dropped. It
// reports whether there is room for one more key. Called with s.mu held; it
// costs a pass and a sort, once per maxKeys/16 new keys at most.
func (s *Local) makeRoom(now time.Time) bool {
	var recs []*localEntry
	for k, e := range s.entries {
		switch {
		case e.hold != nil:
		case !now.Before(e.expires):
			delete(s.entries, k)
		default:
			recs = append(recs, e)
		}
	}
	if len(s.entries) < s.maxKeys {
		return true
	}
	if len(recs) == 0 {
		return false
	}
	drop := min(max(s.maxKeys/16, 1), len(recs))
	slices.SortFunc(recs, func(a, b *localEntry) int { return a.expires.Compare(b.expires) })
	for _, e := range recs[:drop] {
		delete(s.entries, e.key)
	}
	return true
}

type localHold struct {
	store     *Local
	key       string
	fence     int64
	replayTTL time.Duration
}

func (h *localHold) Fence() int64 { return h.fence }

// Lost is always nil: a local hold cannot expire under its holder.
func (h *localHold) Lost() error { return nil }

func (h *localHold) Complete(_ context.Context, rec *Record) error {
	return h.end(rec, h.replayTTL)
}

func (h *localHold) Abort(context.Context) error { return h.end(nil, 0) }

func (h *localHold) end(rec *Record, ttl time.Duration) error {
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[h.key]
	if e == nil || e.hold != h {
		return ErrLost // ended twice
	}
	e.hold = nil
	close(e.done)
	if rec == nil || ttl <= 0 {
		delete(s.entries, h.key)
		return nil
	}
	e.rec, e.expires = rec, s.now().Add(ttl)
	return nil
}
