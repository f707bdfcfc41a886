package certstore

import (
	"strings"
	"time"
)

// How a certificate was chosen for a name.
const (
	MatchExact    = "exact"
	MatchWildcard = "wildcard"
	MatchFirst    = "first" // no pair names it: the first pair
)

// Choice is the pair a name gets, and why.
type Choice struct {
	Index int    // into Config.Pairs
	Match string // MatchExact, MatchWildcard or MatchFirst
}

// pick finds the pair for an SNI name: the exact name, then a wildcard one
// label deep (as RFC 6125 allows), then the first pair.
func (st *state) pick(sni string) Choice {
	name := strings.ToLower(strings.TrimSuffix(sni, "."))
	if i, ok := st.exact[name]; ok {
		return Choice{Index: i, Match: MatchExact}
	}
	if _, parent, ok := strings.Cut(name, "."); ok {
		if i, ok := st.wildcard[parent]; ok {
			return Choice{Index: i, Match: MatchWildcard}
		}
	}
	return Choice{Index: 0, Match: MatchFirst}
}

// Certificate describes one pair in force.
type Certificate struct {
	Pair     Pair
	Names    []string
	NotAfter time.Time
}

// Served returns what a client naming sni would be served, and how.
func (s *Store) Served(sni string) (Certificate, Choice) {
	st := s.state.Load()
	c := st.pick(sni)
	return s.describe(st, c.Index), c
}

// Certificates describes every pair in force, in config order.
func (s *Store) Certificates() []Certificate {
	st := s.state.Load()
	out := make([]Certificate, len(st.pairs))
	for i := range st.pairs {
		out[i] = s.describe(st, i)
	}
	return out
}

func (s *Store) describe(st *state, i int) Certificate {
	leaf := st.pairs[i].cert.Leaf
	return Certificate{Pair: s.cfg.Pairs[i], Names: names(leaf), NotAfter: leaf.NotAfter}
}
