package idempotency

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Defaults of LocalConfig's zero values.
const (
	DefaultMaxKeys  = 100_000
	DefaultMaxBytes = 64 << 20
)

// MinMaxBytes is the smallest LocalConfig.MaxBytes NewLocal accepts: room
// for a few hundred keys, so that a bound set by mistake in bytes of the
// wrong unit is an error rather than a store that refuses every key.
const MinMaxBytes = 64 << 10

// entryOverhead is what the store counts for a key besides the key's bytes
// and its record's body and headers: the map slot, the entry, the record,
// the channel an owner's waiters watch, rounded up.
const entryOverhead = 512

// LocalConfig bounds a Local store. The zero value takes the defaults.
type LocalConfig struct {
	// MaxKeys caps the keys held or recorded (DefaultMaxKeys when zero).
	MaxKeys int
	// MaxBytes caps the bytes the store counts for its keys: each key's
	// bytes and a fixed overhead, plus the body and headers of its record
	// (DefaultMaxBytes when zero, at least MinMaxBytes otherwise).
	MaxBytes int64
}

// LocalStats is what a Local store holds now and has done since it was
// built.
type LocalStats struct {
	Keys     int   // keys held or recorded
	Markers  int   // records kept without their response (done markers)
	Bytes    int64 // counted bytes (see LocalConfig.MaxBytes)
	MaxBytes int64 // the bound
	// BodiesDropped counts responses dropped to stay under MaxBytes, each
	// leaving a done marker.
	BodiesDropped int64
	// Full counts claims refused (ErrFull): every byte was an owner or a done
	// marker still within its replay TTL.
	Full int64
}

// Local keeps idempotency keys in the process: the same behaviour as Redis
// for one instance. An owner lasts as long as its request (the process is the
// holder, so there is nothing to renew); records expire after their replay
// TTL.
//
// Memory is bounded by keys and by bytes. Over a bound, expired records go
// first; then the responses of the records closest to expiry are dropped,
// each leaving a done marker (fingerprint and status, Record.Partial) for
// the rest of its replay TTL, so that a duplicate is told the request was
// done instead of reaching the upstream again. Owners and markers are never
// dropped early: when they alone fill the store, a new key gets ErrFull.
type Local struct {
	now      func() time.Time
	maxKeys  int
	maxBytes int64

	mu      sync.Mutex
	entries map[string]*localEntry
	fence   int64
	bytes   int64
	markers int
	dropped int64
	full    int64
}

var _ Store = (*Local)(nil)

type localEntry struct {
	key     string
	owner   *localOwner   // the current owner; nil once it ended
	done    chan struct{} // closed when owner ends
	rec     *Record
	expires time.Time // of rec
	size    int64     // counted bytes
}

// NewLocal returns an empty store that reads time from now. It starts
// nothing. It rejects a nil clock and bounds out of range.
func NewLocal(now func() time.Time, cfg LocalConfig) (*Local, error) {
	switch {
	case now == nil:
		return nil, fmt.Errorf("creating idempotency store: nil clock")
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("creating idempotency store: max keys %d is negative", cfg.MaxKeys)
	case cfg.MaxBytes < 0 || cfg.MaxBytes > 0 && cfg.MaxBytes < MinMaxBytes:
		return nil, fmt.Errorf("creating idempotency store: max bytes %d is below %d", cfg.MaxBytes, MinMaxBytes)
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	// Fencing tokens start at the start time in microseconds: a restarted
	// gateway hands out larger tokens than the run before it did.
	return &Local{
		now: now, maxKeys: cfg.MaxKeys, maxBytes: cfg.MaxBytes,
		entries: map[string]*localEntry{}, fence: now().UnixMicro(),
	}, nil
}

// Begin claims key. t.LockTTL does not apply: a local owner ends with its
// request.
func (s *Local) Begin(_ context.Context, key string, t Terms) (Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.entries[key]
	switch {
	case e != nil && e.owner != nil:
		return Claim{}, nil
	case e != nil && e.rec != nil && now.Before(e.expires):
		return Claim{Record: e.rec}, nil
	case e != nil:
		s.remove(e) // an expired record
	}
	size := keySize(key)
	if len(s.entries) >= s.maxKeys || s.bytes+size > s.maxBytes {
		if !s.makeRoom(now, size) {
			s.full++
			return Claim{}, ErrFull
		}
	}
	s.fence++
	h := &localOwner{store: s, key: key, fence: s.fence, replayTTL: t.ReplayTTL}
	s.entries[key] = &localEntry{key: key, owner: h, done: make(chan struct{}), size: size}
	s.bytes += size
	return Claim{Owner: h}, nil
}

// Wait returns when key's holder ends or ctx does.
func (s *Local) Wait(ctx context.Context, key string) error {
	s.mu.Lock()
	e := s.entries[key]
	var done chan struct{}
	if e != nil && e.owner != nil {
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

// Stats returns the store's counts; safe for concurrent use.
func (s *Local) Stats() LocalStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return LocalStats{
		Keys: len(s.entries), Markers: s.markers, Bytes: s.bytes, MaxBytes: s.maxBytes,
		BodiesDropped: s.dropped, Full: s.full,
	}
}

// keySize is what a key without a record counts.
func keySize(key string) int64 { return entryOverhead + int64(len(key)) }

// recordSize is what rec adds to its key: the body's capacity (what the
// heap holds) and the headers.
func recordSize(rec *Record) int64 {
	n := int64(cap(rec.Body))
	for name, vs := range rec.Header {
		n += int64(len(name)) + 16 // the slice header of its values
		for _, v := range vs {
			n += int64(len(v)) + 16 // the string header
		}
	}
	return n
}

// remove deletes e. Called with s.mu held.
func (s *Local) remove(e *localEntry) {
	delete(s.entries, e.key)
	s.bytes -= e.size
	if e.rec != nil && e.rec.Partial {
		s.markers--
	}
}

// makeRoom frees room for one more key of size bytes: it drops expired
// records and, if that is not enough, the responses of the records closest
// to expiry, down to a sixteenth below the bounds, so that the pass and its
// sort are paid once per many keys. Keys being held and done markers are
// never dropped. It reports whether there is room. Called with s.mu held.
func (s *Local) makeRoom(now time.Time, size int64) bool {
	var recs []*localEntry
	for _, e := range s.entries {
		switch {
		case e.owner != nil:
		case !now.Before(e.expires):
			s.remove(e)
		default:
			recs = append(recs, e)
		}
	}
	fits := func(slack int64) bool {
		return len(s.entries) < s.maxKeys && s.bytes+size <= s.maxBytes-slack
	}
	if fits(0) {
		return true
	}
	slices.SortFunc(recs, func(a, b *localEntry) int { return a.expires.Compare(b.expires) })
	slack := s.maxBytes / 16
	// At the key cap, the sixteenth of the records closest to expiry go
	// whole, markers included: a marker takes as much of the count as a
	// record, and refusing new keys instead would let one client deny
	// every other the protection for a whole replay TTL.
	if len(s.entries) >= s.maxKeys {
		drop := min(max(s.maxKeys/16, 1), len(recs))
		for _, e := range recs[:drop] {
			s.remove(e)
		}
		recs = recs[drop:]
	}
	for _, e := range recs {
		if fits(slack) {
			break
		}
		s.dropBody(e)
	}
	return fits(0)
}

// dropBody turns e's record into a done marker. Called with s.mu held.
func (s *Local) dropBody(e *localEntry) {
	if e.rec == nil || e.rec.Partial {
		return
	}
	e.rec = &Record{Fingerprint: e.rec.Fingerprint, Status: e.rec.Status, Partial: true}
	s.bytes -= e.size
	e.size = keySize(e.key)
	s.bytes += e.size
	s.markers++
	s.dropped++
}

type localOwner struct {
	store     *Local
	key       string
	fence     int64
	replayTTL time.Duration
}

func (h *localOwner) Fence() int64 { return h.fence }

// Lost is always nil: a local owner cannot lose the key.
func (h *localOwner) Lost() error { return nil }

func (h *localOwner) Complete(_ context.Context, rec *Record) error {
	return h.end(rec, h.replayTTL)
}

func (h *localOwner) Abort(context.Context) error { return h.end(nil, 0) }

func (h *localOwner) end(rec *Record, ttl time.Duration) error {
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[h.key]
	if e == nil || e.owner != h {
		return ErrLost // ended twice
	}
	e.owner = nil
	close(e.done)
	if rec == nil || ttl <= 0 {
		s.remove(e)
		return nil
	}
	now := s.now()
	e.rec, e.expires = rec, now.Add(ttl)
	if rec.Partial {
		s.markers++
	}
	add := recordSize(rec)
	e.size += add
	s.bytes += add
	if s.bytes > s.maxBytes {
		s.shed(now)
	}
	return nil
}

// shed brings the counted bytes back under the bound after a record was
// stored, as makeRoom does for a new key (the new record's response may be
// the one dropped). Called with s.mu held.
func (s *Local) shed(now time.Time) { s.makeRoom(now, 0) }
