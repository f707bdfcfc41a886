package jwtauth

import (
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

// BenchmarkVerify: a hot token (cached: its signature checked once) and a
// token verified in full each time (an RS256 signature).
func BenchmarkVerify(b *testing.B) {
	clock := clocktest.New(t0)
	k := newRSA(b, "k")
	srv := newJWKSServer(b, jwksDoc(b, k))
	ks, err := NewKeySet(KeySetConfig{URL: srv.URL, Clock: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	if err := ks.Refresh(b.Context()); err != nil {
		b.Fatal(err)
	}
	tok, rules := k.token(b, nil), testRules()
	b.Run("cached", func(b *testing.B) {
		v := NewVerifier(ks, 0)
		for b.Loop() {
			if _, verr := v.Verify(tok, rules, clock.Now()); verr != nil {
				b.Fatal(verr.Msg)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		v := NewVerifier(ks, 1)
		for b.Loop() {
			v.cache.drop(sha(tok))
			if _, verr := v.Verify(tok, rules, clock.Now()); verr != nil {
				b.Fatal(verr.Msg)
			}
		}
	})
}
