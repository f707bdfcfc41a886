package certstore

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/certtest"
)

// writePair writes a certificate for names into dir as base.crt/base.key.
func writePair(t *testing.T, ca *certtest.CA, dir, base string, names ...string) Pair {
	t.Helper()
	c, k := ca.Issue(t, certtest.Leaf{CommonName: names[0], DNSNames: names})
	p := Pair{CertFile: filepath.Join(dir, base+".crt"), KeyFile: filepath.Join(dir, base+".key")}
	for f, data := range map[string][]byte{p.CertFile: c, p.KeyFile: k} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// served does a real handshake with s as server and returns the names of
// the certificate the client was given.
func served(t *testing.T, s *Store, ca *certtest.CA, sni string) []string {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, s.TLSConfig())
	go func() { _ = srv.Handshake() }()
	cli := tls.Client(b, &tls.Config{ServerName: sni, RootCAs: ca.Pool(), InsecureSkipVerify: sni == ""})
	if err := cli.Handshake(); err != nil {
		t.Fatalf("handshake for %q: %v", sni, err)
	}
	return cli.ConnectionState().PeerCertificates[0].DNSNames
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestServedBySNI(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	s, err := New(Config{Logger: quiet(), Pairs: []Pair{
		writePair(t, ca, dir, "default", "default.test"),
		writePair(t, ca, dir, "wild", "*.example.test"),
		writePair(t, ca, dir, "api", "api.example.test"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sni, want, match string
	}{
		{"api.example.test", "api.example.test", MatchExact},
		{"API.Example.Test.", "api.example.test", MatchExact},
		{"www.example.test", "*.example.test", MatchWildcard},
		{"a.b.example.test", "default.test", MatchFirst}, // a wildcard covers one label
		{"example.test", "default.test", MatchFirst},
		{"", "default.test", MatchFirst},
	} {
		t.Run(tc.sni, func(t *testing.T) {
			c, choice := s.Served(tc.sni)
			if c.Names[0] != tc.want || choice.Match != tc.match {
				t.Errorf("Served: got %v (%s), want %s (%s)", c.Names, choice.Match, tc.want, tc.match)
			}
			if tc.sni != "" && !strings.HasPrefix(tc.sni, "a.b.") && tc.match != MatchFirst {
				if got := served(t, s, ca, tc.sni); got[0] != tc.want {
					t.Errorf("handshake: got %v, want %s", got, tc.want)
				}
			}
		})
	}
}

func TestMinVersion(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	s, err := New(Config{Logger: quiet(), MinVersion: tls.VersionTLS13, Pairs: []Pair{writePair(t, ca, t.TempDir(), "a", "a.test")}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tls.Server(a, s.TLSConfig()).Handshake() }()
	cli := tls.Client(b, &tls.Config{ServerName: "a.test", RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12})
	if err := cli.Handshake(); err == nil {
		t.Fatal("a TLS 1.2 client got through min_version 1.3")
	}
}

func TestNewNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	_, err := New(Config{Logger: quiet(), Pairs: []Pair{{CertFile: filepath.Join(dir, "no.crt"), KeyFile: filepath.Join(dir, "no.key")}}})
	if err == nil || !strings.Contains(err.Error(), "no.crt") {
		t.Fatalf("got %v, want an error naming no.crt", err)
	}
}

func TestFailedReloadKeepsThePairInForce(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	var mu sync.Mutex
	var outcomes []bool
	s, err := New(Config{Logger: quiet(), Pairs: []Pair{writePair(t, ca, dir, "a", "a.test")},
		OnReload: func(ok bool) { mu.Lock(); outcomes = append(outcomes, ok); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	// A new certificate without its key: the key does not match.
	c, _ := ca.Issue(t, certtest.Leaf{CommonName: "b.test", DNSNames: []string{"b.test"}})
	if err := os.WriteFile(filepath.Join(dir, "a.crt"), c, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "a.crt") {
		t.Fatalf("Reload: got %v, want an error naming a.crt", err)
	}
	if got := served(t, s, ca, "a.test"); got[0] != "a.test" {
		t.Fatalf("after a failed reload: served %v, want a.test", got)
	}
	writePair(t, ca, dir, "a", "b.test")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil { // unchanged: neither counted nor logged
		t.Fatal(err)
	}
	if got := served(t, s, ca, "b.test"); got[0] != "b.test" {
		t.Fatalf("after a good reload: served %v, want b.test", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 2 || outcomes[0] || !outcomes[1] {
		t.Fatalf("reload outcomes: got %v, want [false true]", outcomes)
	}
}

// TestRunFollowsASecretSwap swaps a Kubernetes-style Secret directory's
// "..data" symlink: the files' own paths never change, yet Run reloads.
func TestRunFollowsASecretSwap(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	sd := &certtest.SecretDir{Dir: t.TempDir()}
	pairFiles := func(name string) map[string][]byte {
		c, k := ca.Issue(t, certtest.Leaf{CommonName: name, DNSNames: []string{name}})
		return map[string][]byte{"tls.crt": c, "tls.key": k}
	}
	sd.Write(t, pairFiles("one.test"))
	reloaded := make(chan bool, 4)
	s, err := New(Config{Logger: quiet(), Debounce: 10 * time.Millisecond,
		Pairs:    []Pair{{CertFile: filepath.Join(sd.Dir, "tls.crt"), KeyFile: filepath.Join(sd.Dir, "tls.key")}},
		OnReload: func(ok bool) { reloaded <- ok }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Run may not have added its watch yet: write until it reloads.
	for gen := 2; ; gen++ {
		sd.Write(t, pairFiles("two.test"))
		select {
		case ok := <-reloaded:
			if !ok {
				t.Fatal("the swap's reload failed")
			}
			if got := served(t, s, ca, "two.test"); got[0] != "two.test" {
				t.Fatalf("served %v after the swap, want two.test", got)
			}
			return
		case <-time.After(time.Second):
			if gen > 10 {
				t.Fatal("no reload after 10 swaps")
			}
		}
	}
}
