// Package pool is the state of the gateway's upstream pools: which member
// takes a request (balancing), which members are out (passive health,
// Retry-After, active checks) and how many retries the process may have in
// flight (Budget). It keeps no configuration of its own: each request reads
// its route's policies.Pool from its snapshot, and the health of a member
// is kept by route and member name, so a reload that keeps a pool keeps
// what is known of its members.
//
// Time is a parameter of every decision (now), so that tests drive it.
package pool

import (
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
)

// Snapshots hands out the current configuration (proxy.Snapshots).
type Snapshots interface {
	Load() *policies.Snapshot
}

// Pools holds the state of every pool of the current snapshot. It is a
// process-lifetime resource: build one with New, run its active checks with
// Run. It is safe for concurrent use.
type Pools struct {
	snaps     Snapshots
	now       func() time.Time
	budget    *Budget
	transport http.RoundTripper

	// idx is the current snapshot's pools; mu guards the building of a
	// new one, members and every ejection (which counts the pool's).
	idx     atomic.Pointer[index]
	mu      sync.Mutex
	members map[memberKey]*Member
}

// Config is what Pools are built from. Every field may be zero.
type Config struct {
	// Snapshots is the configuration: a pool that its current snapshot
	// no longer has is forgotten. Nil: the last snapshot asked about is
	// the current one.
	Snapshots Snapshots
	// Now is the clock of ejections and probes (default time.Now).
	Now func() time.Time
	// Budget is the retry budget (default: 20 % of the requests in
	// flight, at least 3).
	Budget *Budget
	// Transport carries the active checks' probes (default a
	// net/http transport of the Pools' own).
	Transport http.RoundTripper
}

// index maps one snapshot's routes to their pools.
type index struct {
	snap    *policies.Snapshot
	byRoute map[*policies.Route]*State
	states  []*State
}

type memberKey struct{ route, member string }

// New returns the Pools of cfg. It starts nothing.
func New(cfg Config) *Pools {
	p := &Pools{snaps: cfg.Snapshots, now: cfg.Now, budget: cfg.Budget, transport: cfg.Transport, members: map[memberKey]*Member{}}
	if p.now == nil {
		p.now = time.Now
	}
	if p.budget == nil {
		p.budget = NewBudget(policies.DefaultRetryBudgetShare, policies.DefaultRetryBudgetMin)
	}
	if p.transport == nil {
		p.transport = &http.Transport{DisableKeepAlives: true}
	}
	return p
}

// Budget is the retry budget requests of every pool draw on.
func (p *Pools) Budget() *Budget { return p.budget }

// Now is the Pools' clock.
func (p *Pools) Now() time.Time { return p.now() }

// For returns the state of route's pool in snap; nil when route has one
// upstream.
func (p *Pools) For(snap *policies.Snapshot, route *policies.Route) *State {
	if route.Pool == nil {
		return nil
	}
	idx := p.idx.Load()
	if idx == nil || idx.snap != snap {
		idx = p.index(snap)
	}
	return idx.byRoute[route]
}

// index builds snap's pools, reusing the members of pools that it keeps.
// Only the current snapshot's index is kept, and only it drops the members
// of pools that are gone: a request still on an older snapshot builds one
// for itself, which changes nothing.
func (p *Pools) index(snap *policies.Snapshot) *index {
	p.mu.Lock()
	defer p.mu.Unlock()
	if idx := p.idx.Load(); idx != nil && idx.snap == snap {
		return idx
	}
	current := p.snaps == nil || p.snaps.Load() == snap
	idx := &index{snap: snap, byRoute: map[*policies.Route]*State{}}
	kept := map[memberKey]bool{}
	for _, rt := range snap.Routes {
		if rt.Pool == nil {
			continue
		}
		st := &State{Route: rt.Name, pool: rt.Pool, pools: p}
		for _, m := range rt.Pool.Members {
			k := memberKey{rt.Name, m.Name}
			mem := p.members[k]
			if mem == nil {
				mem = &Member{Name: m.Name}
				if current {
					p.members[k] = mem
				}
			}
			kept[k] = true
			st.members = append(st.members, mem)
			st.totalWeight += m.Weight
		}
		idx.byRoute[rt] = st
		idx.states = append(idx.states, st)
	}
	if current {
		for k := range p.members {
			if !kept[k] {
				delete(p.members, k)
			}
		}
		p.idx.Store(idx)
	}
	return idx
}

// current is the index of the current snapshot.
func (p *Pools) current() *index {
	if p.snaps == nil {
		return p.idx.Load()
	}
	snap := p.snaps.Load()
	if idx := p.idx.Load(); idx != nil && idx.snap == snap {
		return idx
	}
	return p.index(snap)
}

// State is one route's pool as one snapshot has it: its members' states in
// the order of its config.
type State struct {
	Route       string
	pool        *policies.Pool
	pools       *Pools
	members     []*Member
	totalWeight int
	rr          atomic.Uint64
}

// Len is the number of members.
func (s *State) Len() int { return len(s.members) }

// Config is the pool as its snapshot declares it.
func (s *State) Config() *policies.Pool { return s.pool }

// Member is the i-th member's state.
func (s *State) Member(i int) *Member { return s.members[i] }

// Tried is a set of members (by index) a request has tried.
type Tried uint64

// Add returns t with member i.
func (t Tried) Add(i int) Tried { return t | 1<<uint(i) }

// Has reports whether t holds member i.
func (t Tried) Has(i int) bool { return t&(1<<uint(i)) != 0 }

// Pick chooses a member for a request that has tried the members of tried,
// by the pool's balance (key is a hash balance's key, when the request has
// one). Members that are out (ejected, waiting out a Retry-After, down by
// their checks) are passed over; when every untried member is out, the
// least bad of them serves. ok is false when every member has been tried.
func (s *State) Pick(now time.Time, key string, hasKey bool, tried Tried) (i int, ok bool) {
	var stack [policies.MaxPoolMembers]int
	in := stack[:0]
	for j, m := range s.members {
		if !tried.Has(j) && m.in(now) {
			in = append(in, j)
		}
	}
	if len(in) == 0 {
		return s.leastBad(now, tried)
	}
	switch s.pool.Balance {
	case policies.BalanceHash:
		if hasKey {
			return s.rendezvous(key, in), true
		}
		return s.roundRobin(in, tried), true
	case policies.BalanceLeastRequest:
		return s.twoChoices(in), true
	default:
		return s.roundRobin(in, tried), true
	}
}

// roundRobin takes members in turn, each as often as its weight: the turn
// is a point on the pool's total weight; the member it falls on takes it,
// or the next one in that is after it. A retry takes the turn after its
// request's without moving it: the members' shares stay their weights'.
func (s *State) roundRobin(in []int, tried Tried) int {
	var turn uint64
	if tried == 0 {
		turn = s.rr.Add(1) - 1
	} else {
		turn = s.rr.Load()
	}
	pos := int(turn % uint64(s.totalWeight))
	at := 0
	for j, m := range s.pool.Members {
		if pos < m.Weight {
			at = j
			break
		}
		pos -= m.Weight
	}
	for _, j := range in {
		if j >= at {
			return j
		}
	}
	return in[0]
}

// twoChoices picks two members at random and takes the one with fewer
// requests in flight for its weight.
func (s *State) twoChoices(in []int) int {
	if len(in) == 1 {
		return in[0]
	}
	a := rand.IntN(len(in))
	b := rand.IntN(len(in) - 1)
	if b >= a {
		b++
	}
	i, j := in[a], in[b]
	wi, wj := int64(s.pool.Members[i].Weight), int64(s.pool.Members[j].Weight)
	if s.members[j].inflight.Load()*wi < s.members[i].inflight.Load()*wj {
		return j
	}
	return i
}

// rendezvous is weighted rendezvous hashing: each member scores the key,
// the highest score takes it. A member that is out gives up only its own
// keys, which go where they would have gone without it.
func (s *State) rendezvous(key string, in []int) int {
	best, bestScore := in[0], math.Inf(-1)
	for _, j := range in {
		m := s.pool.Members[j]
		h := hash64(key, m.Name)
		// A uniform (0, 1) from the hash's top 53 bits.
		u := (float64(h>>11) + 0.5) / (1 << 53)
		score := -float64(m.Weight) / math.Log(u)
		if score > bestScore {
			best, bestScore = j, score
		}
	}
	return best
}

// HashPick is the member balance: hash gives key when every member is in.
func (s *State) HashPick(key string) int {
	all := make([]int, len(s.members))
	for j := range all {
		all[j] = j
	}
	return s.rendezvous(key, all)
}

// hash64 is FNV-1a of key and name with a separator, finished by
// splitmix64's mixer: the same on every instance of the gateway.
func hash64(key, name string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	h = (h ^ 0x1f) * prime
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// leastBad is the untried member that is back soonest.
func (s *State) leastBad(now time.Time, tried Tried) (int, bool) {
	best, ok := -1, false
	var bestAt int64
	for j, m := range s.members {
		if tried.Has(j) {
			continue
		}
		at := m.backAt(now)
		if !ok || at < bestAt {
			best, bestAt, ok = j, at, true
		}
	}
	return best, ok
}
