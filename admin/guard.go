package admin

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Guessing is slowed per peer: after maxFailures wrong tokens (bearer or
// login form) within failureWindow of its first, a peer is answered 429
// with Retry-After until the window ends, whatever it sends, so that a
// right guess cannot be told from a wrong one while it waits. A session
// cookie that does not verify is not counted: it cannot be guessed (an
// HMAC-SHA256), and a browser holding one from before a restart would
// otherwise lock its operator out.
const (
	maxFailures   = 5
	failureWindow = time.Minute
	// maxPeers bounds the table of peers with failures. When it is full of
	// live entries, a new peer is answered 429 too: evicting one instead
	// would give an attacker with more addresses than the table holds
	// endless guesses.
	maxPeers = 10000
)

// AuthFailure is what a refused credential was counted as.
type AuthFailure string

// The values Config.OnAuthFailure receives.
const (
	// AuthWrong is a wrong token (401, or a failed login).
	AuthWrong AuthFailure = "wrong"
	// AuthThrottled is a request answered 429 because its peer failed too
	// often.
	AuthThrottled AuthFailure = "throttled"
)

// strikes are one peer's failures in its current window.
type strikes struct {
	n     int
	since time.Time // the window's first failure
}

// guard counts failures per peer. It is safe for concurrent use.
type guard struct {
	mu        sync.Mutex
	peers     map[netip.Addr]*strikes // guarded by mu; at most maxPeers
	nextSweep time.Time               // guarded by mu: when a full table may be swept again
}

func newGuard() *guard {
	return &guard{peers: make(map[netip.Addr]*strikes)}
}

// peerOf is the key of r's peer: its address, an IPv6 one by its /64 (one
// host commonly holds a whole /64). An address that does not parse is the
// zero Addr: all such peers share one entry.
func peerOf(remoteAddr string) netip.Addr {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return a
}

// wait reports how long peer must wait before it may try again at now; 0
// when it may.
func (g *guard) wait(peer netip.Addr, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.peers[peer]; s != nil {
		end := s.since.Add(failureWindow)
		if !now.Before(end) {
			delete(g.peers, peer)
			return 0
		}
		if s.n >= maxFailures {
			return end.Sub(now)
		}
		return 0
	}
	if len(g.peers) < maxPeers {
		return 0
	}
	return g.sweep(now)
}

// sweep drops the expired entries of a full table, at most once a second
// (a pass over the whole table), and returns how long a new peer must wait
// for room: 0 when there is room now.
func (g *guard) sweep(now time.Time) time.Duration {
	if now.Before(g.nextSweep) {
		return g.nextSweep.Sub(now)
	}
	g.nextSweep = now.Add(time.Second)
	for p, s := range g.peers {
		if !now.Before(s.since.Add(failureWindow)) {
			delete(g.peers, p)
		}
	}
	if len(g.peers) < maxPeers {
		return 0
	}
	return time.Second
}

// fail counts one failure of peer at now.
func (g *guard) fail(peer netip.Addr, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.peers[peer]
	switch {
	case s == nil && len(g.peers) >= maxPeers:
		return // wait refuses this peer until there is room
	case s == nil || !now.Before(s.since.Add(failureWindow)):
		g.peers[peer] = &strikes{n: 1, since: now}
	default:
		s.n++
	}
}

// size is the number of peers the table holds.
func (g *guard) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.peers)
}
