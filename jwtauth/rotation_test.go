package jwtauth

import (
	"context"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

func TestUnknownKidAsksOneRefreshPerCooldown(t *testing.T) {
	clock := clocktest.New(t0)
	old, fresh := newRSA(t, "old"), newRSA(t, "new")
	srv := newJWKSServer(t, jwksDoc(t, old))
	refreshed := make(chan error, 16)
	ks, err := NewKeySet(KeySetConfig{URL: srv.URL, Clock: clock.Now, Cooldown: 30 * time.Second,
		Refresh: time.Hour, OnRefresh: func(err error) { refreshed <- err }})
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-refreshed
	v := NewVerifier(ks, 0)
	tok := fresh.token(t, nil)

	// Not published yet: refused at once, and only the first asks Run for
	// a refresh.
	for i := 0; i < 100; i++ {
		if _, verr := v.Verify(tok, testRules(), clock.Now()); verr == nil || verr.Reason != ReasonUnknownKey {
			t.Fatalf("got %v, want unknown_kid", verr)
		}
	}
	if got := len(ks.kick); got != 1 {
		t.Fatalf("got %d refreshes asked for, want 1", got)
	}
	<-ks.kick // as Run would take it

	srv.publish(jwksDoc(t, old, fresh))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ks.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Inside the cooldown: still refused at once, no refresh asked.
	clock.Advance(29 * time.Second)
	if _, verr := v.Verify(tok, testRules(), clock.Now()); verr == nil || verr.Reason != ReasonUnknownKey {
		t.Fatalf("inside the cooldown: got %v, want unknown_kid", verr)
	}
	select {
	case err := <-refreshed:
		t.Fatalf("a refresh ran inside the cooldown (err %v)", err)
	default:
	}
	fetches := srv.fetches.Load()

	// After it: one refresh, and the token passes once it ran.
	clock.Advance(time.Second)
	if _, verr := v.Verify(tok, testRules(), clock.Now()); verr == nil {
		t.Fatal("accepted before the refresh ran")
	}
	if err := <-refreshed; err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if got := srv.fetches.Load() - fetches; got != 1 {
		t.Errorf("got %d fetches, want 1", got)
	}
	if _, verr := v.Verify(tok, testRules(), clock.Now()); verr != nil {
		t.Fatalf("after the refresh: %s", verr.Msg)
	}
}

// TestRotationMidFlood rotates the signing key while 64 clients send
// tokens: once one refresh after the new key's publication has run, no
// valid token is refused; with the JWKS server down for a minute, tokens
// of known keys pass as before.
func TestRotationMidFlood(t *testing.T) {
	clock := clocktest.New(t0)
	old, fresh := newRSA(t, "old"), newRSA(t, "new")
	srv := newJWKSServer(t, jwksDoc(t, old))
	var refreshes atomic.Int64
	// afterPublication is closed once a refresh that started after the
	// new key's publication has run (one that started before may end
	// after it, with the old document).
	afterPublication := make(chan struct{})
	ks, err := NewKeySet(KeySetConfig{URL: srv.URL, Clock: clock.Now, Refresh: time.Hour, OnRefresh: func(error) { refreshes.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ks.Run(ctx) }()
	defer func() { cancel(); <-done }()

	v := NewVerifier(ks, 0)
	rules := testRules()
	oldTok, newTok := old.token(t, nil), fresh.token(t, nil)
	// Each client sends until it has sent afterRefresh tokens since the
	// refresh ran: at most maxPerClient in all, for at most 20 s.
	const clients, afterRefresh, maxPerClient = 64, 50, 1 << 21
	stop := time.Now().Add(20 * time.Second)
	var refusedAfter, refusedBefore, accepted, sentAfter atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			<-start
			after := 0
			for i := 0; i < maxPerClient && after < afterRefresh && (i%1024 != 0 || time.Now().Before(stop)); i++ {
				tok := oldTok
				if c%2 == 0 { // half the clients use the new key from the start
					tok = newTok
				}
				// Read the state before verifying: a refusal counts
				// against the guarantee only if the refresh had run.
				var ranBefore bool
				select {
				case <-afterPublication:
					ranBefore = true
					after++
					sentAfter.Add(1)
				default:
				}
				if _, verr := v.Verify(tok, rules, clock.Now()); verr != nil {
					if ranBefore {
						refusedAfter.Add(1)
						t.Errorf("refused after the refresh: %s", verr.Reason)
					} else {
						refusedBefore.Add(1)
					}
					continue
				}
				accepted.Add(1)
			}
		}(c)
	}
	close(start)
	// Mid-flood: once the new-key clients are being refused.
	for deadline := time.Now().Add(10 * time.Second); refusedBefore.Load() == 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("no token of the new key was refused before its publication within 10s")
		}
	}
	srv.publish(jwksDoc(t, old, fresh))
	if err := ks.Refresh(ctx); err != nil { // as the ticker would
		t.Fatal(err)
	}
	close(afterPublication)
	wg.Wait()
	if refusedAfter.Load() != 0 {
		t.Fatalf("got %d refusals after the refresh, want 0", refusedAfter.Load())
	}
	if got := sentAfter.Load(); got != clients*afterRefresh {
		t.Fatalf("got %d tokens sent after the refresh, want %d", got, clients*afterRefresh)
	}
	t.Logf("accepted %d, refused before the refresh %d, refreshes %d", accepted.Load(), refusedBefore.Load(), refreshes.Load())

	// The JWKS server is down for a minute: refreshes fail, keys stay.
	srv.down.Store(true)
	for i := 0; i < 6; i++ {
		clock.Advance(10 * time.Second)
		if err := ks.Refresh(ctx); err == nil {
			t.Fatal("refresh against a down server succeeded")
		}
		for _, tok := range []string{oldTok, newTok} {
			if _, verr := v.Verify(tok, rules, clock.Now()); verr != nil {
				t.Fatalf("with the JWKS down %ds: refused %s", (i+1)*10, verr.Reason)
			}
		}
	}
	if got := ks.Len(); got != 2 {
		t.Errorf("got %d keys with the server down, want 2", got)
	}
}

func TestCachedTokenLeavesWithItsKey(t *testing.T) {
	clock := clocktest.New(t0)
	a, b := newRSA(t, "a"), newRSA(t, "b")
	ks, srv := keysFor(t, clock, a, b)
	v := NewVerifier(ks, 2)
	tokA := a.token(t, nil)
	if _, verr := v.Verify(tokA, testRules(), clock.Now()); verr != nil {
		t.Fatal(verr.Msg)
	}
	if got := v.cache.len(); got != 1 {
		t.Fatalf("got %d cached, want 1", got)
	}
	// A cached token meets a reload's rules: another audience refuses it.
	other := testRules()
	other.Audiences = []string{"other"}
	if _, verr := v.Verify(tokA, other, clock.Now()); verr == nil || verr.Reason != ReasonWrongAudience {
		t.Fatalf("a cached token under new audiences: got %v, want wrong_audience", verr)
	}
	if _, verr := v.Verify(tokA, testRules(), clock.Now()); verr != nil {
		t.Fatal(verr.Msg)
	}
	// A refresh that keeps the same JWK keeps the cached token.
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, verr := v.Verify(tokA, testRules(), clock.Now()); verr != nil {
		t.Fatal(verr.Msg)
	}
	srv.publish(jwksDoc(t, b))
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, verr := v.Verify(tokA, testRules(), clock.Now()); verr == nil || verr.Reason != ReasonUnknownKey {
		t.Fatalf("a token of a removed key: got %v, want unknown_kid", verr)
	}
	// The cache stays within its bound, and an expired token leaves it.
	for i := 0; i < 5; i++ {
		if _, verr := v.Verify(b.token(t, map[string]any{"sub": string(rune('a' + i))}), testRules(), clock.Now()); verr != nil {
			t.Fatal(verr.Msg)
		}
	}
	if got := v.cache.len(); got > 2 {
		t.Errorf("got %d cached, want at most 2", got)
	}
	tokB := b.token(t, nil)
	if _, verr := v.Verify(tokB, testRules(), clock.Now()); verr != nil {
		t.Fatal(verr.Msg)
	}
	clock.Advance(time.Hour + time.Minute)
	if _, verr := v.Verify(tokB, testRules(), clock.Now()); verr == nil || verr.Reason != ReasonExpired {
		t.Fatalf("a cached token past exp: got %v, want expired", verr)
	}
}

func TestDiscoveryAndFile(t *testing.T) {
	clock := clocktest.New(t0)
	k := newRSA(t, "k")
	srv := newJWKSServer(t, jwksDoc(t, k))
	ks, err := NewKeySet(KeySetConfig{Issuer: srv.URL, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatalf("discovery: %v", err)
	}
	if ks.Len() != 1 {
		t.Errorf("got %d keys by discovery, want 1", ks.Len())
	}
	bad, err := NewKeySet(KeySetConfig{Issuer: srv.URL + "/other", Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Refresh(context.Background()); err == nil {
		t.Error("discovery of an issuer the document does not name succeeded")
	}
	if _, err := NewKeySet(KeySetConfig{}); err == nil {
		t.Error("a key set without a source was built")
	}
}

func TestKeysFromFile(t *testing.T) {
	clock := clocktest.New(t0)
	k := newRSA(t, "k")
	name := t.TempDir() + "/jwks.json"
	if err := os.WriteFile(name, jwksDoc(t, k), 0o600); err != nil {
		t.Fatal(err)
	}
	ks, err := NewKeySet(KeySetConfig{File: name, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatalf("reading the file: %v", err)
	}
	if _, verr := NewVerifier(ks, 0).Verify(k.token(t, nil), testRules(), clock.Now()); verr != nil {
		t.Fatalf("refused: %s", verr.Msg)
	}
	// A broken file keeps the keys read before.
	if err := os.WriteFile(name, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ks.Refresh(context.Background()); err == nil {
		t.Error("a JWKS with only a symmetric key was accepted")
	}
	if ks.Len() != 1 {
		t.Errorf("got %d keys, want the 1 read before", ks.Len())
	}
}
