package limiter

import (
	"hash/maphash"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter/internal/shardmap"
)

// DefaultMaxKeys is the default cap on buckets per policy and limit.
const DefaultMaxKeys = 100_000

// minSweepEvery bounds how often one shard is swept for idle buckets.
const minSweepEvery = time.Second

// Local keeps in-process token buckets in sharded
// maps with idle expiry and a hard cap on keys per policy and limit, so a flood
// of random keys cannot grow memory without bound. Buckets are grouped by
// (policy name, limit): a reload that keeps a policy's limit keeps its buckets,
// a changed limit starts fresh buckets from the next request.
//
// The zero value is not usable; use NewLocal. Local is safe for concurrent use.
type Local struct {
	maxKeys int
	seed    maphash.Seed

	// stores is read on every decision and replaced (copied, under mu) only
	// when a group appears or goes: a lock-free read, where an RWMutex's
	// read lock is a write to one cache line that every core shares.
	stores atomic.Pointer[map[BucketGroup]*bucketStore]
	mu     sync.RWMutex // serializes stores' writers; guards slotStores
	// slotStores count the requests in flight of InFlight policies. They are
	// never dropped (see slotStore): an empty one is a few hundred bytes.
	slotStores map[slotGroup]*slotStore

	counters localCounters // see Stats
}

// NewLocal returns an empty set of local buckets holding at most maxKeys keys
// per policy and limit; maxKeys <= 0 means DefaultMaxKeys.
func NewLocal(maxKeys int) *Local {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	l := &Local{
		maxKeys:    maxKeys,
		seed:       maphash.MakeSeed(),
		slotStores: make(map[slotGroup]*slotStore),
	}
	l.stores.Store(&map[BucketGroup]*bucketStore{})
	return l
}

// bucketStores is the current groups' stores; the map is never written.
func (l *Local) bucketStores() map[BucketGroup]*bucketStore { return *l.stores.Load() }

// Retain drops the buckets of every group for which keep is false. It is
// called after a reload with the limits of the new snapshot. Slots of
// requests in flight are kept: those requests still hold them.
func (l *Local) Retain(keep func(BucketGroup) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := make(map[BucketGroup]*bucketStore)
	for g, s := range l.bucketStores() {
		if keep(g) {
			kept[g] = s
		}
	}
	l.stores.Store(&kept)
}

// Keys returns how many buckets g holds or, for an InFlight group, how many
// keys have requests in flight (0 once every slot came back).
func (l *Local) Keys(g BucketGroup) int {
	if g.Algorithm.InFlight() {
		return l.slots(g).m.Len()
	}
	s := l.bucketStores()[g.buckets()]
	if s == nil {
		return 0
	}
	return s.len()
}

func (l *Local) store(g BucketGroup) *bucketStore {
	g = g.buckets()
	if s := l.bucketStores()[g]; s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.bucketStores()
	if s := cur[g]; s != nil {
		return s
	}
	s := newBucketStore(g.Limit, l.maxKeys, l.seed, &l.counters)
	next := make(map[BucketGroup]*bucketStore, len(cur)+1)
	maps.Copy(next, cur)
	next[g] = s
	l.stores.Store(&next)
	return s
}

// ruleStore is the bucket store a rule's checks found for group g in the
// stores map m: valid while m is the current map (a group that appears or
// goes replaces it) and the checks ask for g.
type ruleStore struct {
	m *map[BucketGroup]*bucketStore
	g BucketGroup
	s *bucketStore
}

// storeFor is store(g) for a check of rule, remembering the store on the
// rule. A rule asked at more than one limit (a tenant's plan picks it)
// keeps the first it was asked at since the map last changed, and finds
// the others by the map: the cache never allocates on every check.
func (l *Local) storeFor(rule *Rule, g BucketGroup) *bucketStore {
	m := l.stores.Load()
	c := rule.store.Load()
	if c != nil && c.m == m {
		if c.g == g {
			return c.s
		}
		return l.store(g)
	}
	s := (*m)[g.buckets()]
	if s == nil {
		return l.store(g) // a new group, cached by the next check
	}
	rule.store.Store(&ruleStore{m: m, g: g, s: s})
	return s
}

// BucketGroup names the buckets of one policy at one limit. Fallback marks
// the buckets a shared policy falls back to while Redis is down (see
// FailLocal), kept apart from any local policy of the same name. Algorithm
// chooses what Reserve takes: a slot for an InFlight algorithm (Concurrency,
// or SharedConcurrency's fallback), tokens from a bucket for any other,
// including the zero value.
type BucketGroup struct {
	Policy    string
	Limit     Limit
	Fallback  bool
	Algorithm Algorithm
}

// buckets is g as its token buckets are stored: the algorithm does not
// split them (Retain's keep functions never see it).
func (g BucketGroup) buckets() BucketGroup {
	g.Algorithm = ""
	return g
}

// Allow takes cost units (at least 1) from key's bucket under lim, now. It
// is AllowAt(time.Now(), key, lim, cost).
func (l *Local) Allow(key string, lim Limit, cost int64) Decision {
	return l.AllowAt(time.Now(), key, lim, cost)
}

// AllowAt takes cost units (at least 1) from key's bucket under lim at now.
// Keys of different limits never share a bucket.
func (l *Local) AllowAt(now time.Time, key string, lim Limit, cost int64) Decision {
	var t localTake
	return l.reserve(now, nil, BucketGroup{Limit: lim}, key, cost, &t)
}

// Reserve takes cost units (at least 1) from key's bucket in g at now. When
// allowed, the Reservation settles them later (at time.Now): given back
// exactly by Release when another policy denies the same request, or settled
// to the request's real cost. A denied request changes nothing, and its
// Reservation is nil. The Reservation has one check, of g's policy,
// algorithm and limit.
//
// For an InFlight group it takes one slot of key (cost is ignored), denied
// with ReasonLimited and SlotRetryAfter when all Limit.Quota() are taken;
// Release gives it back.
func (l *Local) Reserve(now time.Time, g BucketGroup, key string, cost int64) (Decision, *Reservation) {
	c := Check{Rule: &Rule{Name: g.Policy, Algorithm: g.Algorithm}, Limit: g.Limit, Key: key, Cost: cost}
	res := &Reservation{clock: time.Now, checks: []Check{c}, local: make([]localTake, 1)}
	d := l.reserve(now, nil, g, key, cost, &res.local[0])
	if !d.Allowed {
		return d, nil
	}
	return d, res
}

// reserve is Reserve filling t, which must have taken nothing, instead of
// allocating a Reservation; t holds what an allowed decision took. rule,
// when not nil, is the check's, which remembers its bucket store.
func (l *Local) reserve(now time.Time, rule *Rule, g BucketGroup, key string, cost int64, t *localTake) Decision {
	cost = max(cost, 1)
	if g.Algorithm.InFlight() {
		cost = 1
	}
	if reason := g.Limit.refusal(cost); reason != ReasonNone {
		return staticDenial(g.Policy, g.Limit, reason)
	}
	if g.Algorithm.InFlight() {
		return l.acquireSlot(now, g, key, t)
	}
	d, _ := l.take(now, rule, g, key, cost, t)
	return d
}

// take is reserve for a rate group (not InFlight); it reports whether the
// request was allowed (t is then what settles it).
func (l *Local) take(now time.Time, rule *Rule, g BucketGroup, key string, cost int64, t *localTake) (Decision, bool) {
	cost = max(cost, 1)
	if reason := g.Limit.refusal(cost); reason != ReasonNone {
		return staticDenial(g.Policy, g.Limit, reason), false
	}
	var s *bucketStore
	if rule != nil {
		s = l.storeFor(rule, g)
	} else {
		s = l.store(g)
	}
	b := s.get(key, now)
	r := b.take(now, g.Limit, cost)
	d := Decision{Policy: g.Policy, Limit: g.Limit, Allowed: r.allowed, Remaining: r.remaining, ResetAfter: r.resetAfter, RetryAfter: r.retryAfter}
	if !r.allowed {
		d.Reason = ReasonLimited // Remaining stays: what is left, too little for cost
		return d, false
	}
	t.b, t.lim, t.units = b, g.Limit, cost
	return d, true
}

// Peek reports key's bucket in g at now without taking anything: what
// remains, when it is full again, and whether one unit would pass.
func (l *Local) Peek(now time.Time, g BucketGroup, key string) Decision {
	return l.PeekN(now, g, key, 1)
}

// PeekN is Peek for a request of cost units: whether it would pass, and
// when it could if not.
func (l *Local) PeekN(now time.Time, g BucketGroup, key string, cost int64) Decision {
	cost = max(cost, 1)
	d := Decision{Policy: g.Policy, Limit: g.Limit, Allowed: true, Remaining: g.Limit.Quota()}
	if reason := g.Limit.refusal(cost); reason != ReasonNone {
		return staticDenial(g.Policy, g.Limit, reason)
	}
	if g.Algorithm.InFlight() {
		return l.peekSlot(g, key)
	}
	s := l.bucketStores()[g.buckets()]
	if s == nil {
		return d
	}
	sh := s.m.Shard(key)
	sh.RLock()
	b, ok := sh.Get(key)
	sh.RUnlock()
	if !ok {
		return d
	}
	r := b.peek(now, g.Limit, cost)
	d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter = r.allowed, r.remaining, r.resetAfter, r.retryAfter
	if !d.Allowed {
		d.Reason = ReasonLimited
	}
	return d
}

// localTake is what one admitted check took in-process: tokens of a
// bucket, or a slot; the zero value took nothing. It is a Reservation's part
// for one check. Its methods are safe for concurrent use with the bucket's
// other users, but one localTake belongs to one request.
type localTake struct {
	b     *bucket
	slot  *slotCount // an InFlight group's slot, instead of b
	slots *slotStore // where slot is counted
	key   string     // slot's key
	// released makes a slot's release happen once, whoever settles the
	// request and however often.
	released atomic.Bool
	lim      Limit
	units    int64
}

// adjust makes t hold units (the request's real cost) at now: the bucket
// gives back what was taken beyond it, or takes what it cost beyond what
// was reserved, even past empty (later requests then wait for the debt).
// A slot is given back, once, by units 0; other values keep it.
func (t *localTake) adjust(now time.Time, units int64) {
	if t.slot != nil {
		if units <= 0 && t.released.CompareAndSwap(false, true) {
			t.slots.release(t.key, t.slot)
		}
		return
	}
	if t.b == nil {
		return
	}
	delta := max(units, 0) - t.units
	if delta == 0 {
		return
	}
	t.b.adjust(now, saturatingNanos(t.lim.emission()*float64(delta)))
	t.units += delta
}

// release gives everything back.
func (t *localTake) release() { t.adjust(time.Time{}, 0) }

// emission is the time one token takes to come back, in nanoseconds.
func (l Limit) emission() float64 { return float64(l.Period) / float64(l.Rate) }

// fillTime is how long an empty bucket takes to be full again.
func fillTime(lim Limit) time.Duration {
	return time.Duration(lim.emission() * float64(lim.Quota()))
}

// bucket is one key's token bucket, kept as GCRA state: tat is the instant
// at which the bucket is full again, so taking n tokens moves it forward by n
// emissions and giving them back moves it back by as much, exactly, whatever
// happened in between. It is hand-written because x/time/rate cannot give
// tokens back exactly: its CancelAt restores less once later reservations
// exist, and nothing after their time.
// mu guards tat and last.
type bucket struct {
	mu       sync.Mutex
	tat      int64        // Unix ns; at or before now means full
	last     int64        // the latest instant seen: time never runs backwards here
	lastSeen atomic.Int64 // as last, readable without mu by idle sweeps and eviction
}

// grant is the outcome of one take.
type grant struct {
	allowed    bool
	remaining  int64
	resetAfter time.Duration
	retryAfter time.Duration
}

// take admits cost tokens at now if the bucket holds them. An instant older
// than one already seen (read before waiting for mu, while a later one got
// here first) counts as that later instant, so no token is granted twice.
func (b *bucket) take(now time.Time, lim Limit, cost int64) grant {
	emission := lim.emission()
	inc := saturatingNanos(emission * float64(cost))
	tolerance := saturatingNanos(emission * float64(lim.Quota()))

	b.mu.Lock()
	defer b.mu.Unlock()
	t := max(now.UnixNano(), b.last)
	b.last = t
	b.lastSeen.Store(t)
	tat := max(b.tat, t)
	newTAT := tat + inc
	if allowAt := newTAT - tolerance; t < allowAt {
		// What remains is still reported: a refusal of a large cost is not
		// an empty bucket.
		left := math.Floor(float64(t+tolerance-tat)/emission + 1e-6)
		return grant{
			remaining:  int64(min(max(0, left), float64(lim.Quota()))),
			retryAfter: time.Duration(allowAt - t), resetAfter: time.Duration(tat - t),
		}
	}
	b.tat = newTAT
	// The epsilon keeps 2.9999999 tokens (float emission) at 3.
	left := math.Floor(float64(t+tolerance-newTAT)/emission + 1e-6)
	return grant{
		allowed:    true,
		remaining:  int64(min(max(0, left), float64(lim.Quota()))),
		resetAfter: time.Duration(newTAT - t),
	}
}

// peek is take without taking: what cost more units would find at now.
func (b *bucket) peek(now time.Time, lim Limit, cost int64) grant {
	emission := lim.emission()
	tolerance := saturatingNanos(emission * float64(lim.Quota()))
	b.mu.Lock()
	defer b.mu.Unlock()
	t := max(now.UnixNano(), b.last)
	tat := max(b.tat, t)
	left := math.Floor(float64(t+tolerance-tat)/emission + 1e-6)
	g := grant{
		allowed:    left >= float64(cost),
		remaining:  int64(min(max(0, left), float64(lim.Quota()))),
		resetAfter: time.Duration(tat - t),
	}
	if !g.allowed {
		g.retryAfter = time.Duration(tat + saturatingNanos(emission*float64(cost)) - tolerance - t)
	}
	return g
}

// adjust moves tat by d nanoseconds: back gives tokens back exactly,
// forward takes more, counted from now when the bucket had refilled.
func (b *bucket) adjust(now time.Time, d int64) {
	b.mu.Lock()
	if d > 0 {
		b.tat = max(b.tat, now.UnixNano(), b.last)
	}
	b.tat += d
	b.mu.Unlock()
}

func saturatingNanos(f float64) int64 {
	if f >= math.MaxInt64/4 {
		return math.MaxInt64 / 4 // far beyond any period; leaves room for additions
	}
	return int64(math.Round(f))
}

// bucketStore holds the buckets of one (policy, limit).
type bucketStore struct {
	lim  Limit
	idle time.Duration // a bucket idle this long is full again: dropping it changes nothing
	m    *shardmap.Map[string, *bucket]
}

func newBucketStore(lim Limit, maxKeys int, seed maphash.Seed, c *localCounters) *bucketStore {
	idle := fillTime(lim)
	return &bucketStore{lim: lim, idle: idle, m: shardmap.New(shardmap.Config[string, *bucket]{
		Cap:        maxKeys,
		Hash:       func(k string) uint64 { return maphash.String(seed, k) },
		Expired:    func(b *bucket, now int64) bool { return b.lastSeen.Load() <= now-int64(idle) },
		Score:      func(b *bucket) int64 { return b.lastSeen.Load() },
		SweepEvery: max(idle, minSweepEvery),
		OnEvict:    func() { c.evictions.Add(1) },
		OnExpire:   func() { c.expired.Add(1) },
	})}
}

func (s *bucketStore) len() int { return s.m.Len() }

func (s *bucketStore) get(key string, now time.Time) *bucket {
	sh := s.m.Shard(key)
	sh.RLock()
	b, ok := sh.Get(key)
	sh.RUnlock()
	if ok {
		return b
	}
	sh.Lock()
	defer sh.Unlock()
	if b, ok = sh.Get(key); !ok {
		b = &bucket{}
		b.lastSeen.Store(now.UnixNano())
		sh.Set(key, b, now.UnixNano())
	}
	return b
}
