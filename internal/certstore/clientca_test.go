package certstore

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/certtest"
)

// handshakeWith presents a client certificate that clientCA signed.
func handshakeWith(t *testing.T, s *Store, serverCA, clientCA *certtest.CA, config func(*Store) *tls.Config) error {
	t.Helper()
	certPEM, keyPEM := clientCA.Issue(t, certtest.Leaf{CommonName: "client", Client: true})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// Loopback sockets, not net.Pipe: a server refusing a TLS 1.3 client
	// writes its alert after the client has finished, and a pipe would
	// block that write until someone reads.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer conn.Close()
		srvErr <- tls.Server(conn, config(s)).Handshake()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := tls.Client(conn, &tls.Config{ServerName: "a.test", RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{pair}})
	_ = cli.Handshake() // in TLS 1.3 the client may finish before the server judges it
	return <-srvErr
}

func TestClientCAFollowsAReload(t *testing.T) {
	serverCA, first, second := certtest.NewCA(t, "server"), certtest.NewCA(t, "first"), certtest.NewCA(t, "second")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, first.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Logger: quiet(), ClientCAFile: caFile, ClientAuth: tls.RequireAndVerifyClientCert,
		Pairs: []Pair{writePair(t, serverCA, dir, "a", "a.test")}})
	if err != nil {
		t.Fatal(err)
	}
	clients := (*Store).TLSConfig
	if err := handshakeWith(t, s, serverCA, first, clients); err != nil {
		t.Fatalf("a client of the CA in force: %v", err)
	}
	if err := handshakeWith(t, s, serverCA, second, clients); err == nil {
		t.Fatal("a client of another CA got through")
	}
	if err := os.WriteFile(caFile, second.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := handshakeWith(t, s, serverCA, second, clients); err != nil {
		t.Fatalf("a client of the reloaded CA: %v", err)
	}
	// The admin listener's config never asks for a certificate.
	if err := handshakeWith(t, s, serverCA, first, (*Store).TLSConfigWithoutClientAuth); err != nil {
		t.Fatalf("without client auth: %v", err)
	}
	// A CA file that is no longer PEM keeps the CA in force.
	if err := os.WriteFile(caFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload of a CA file without a certificate: got no error")
	}
	if err := handshakeWith(t, s, serverCA, second, clients); err != nil {
		t.Fatalf("after a failed CA reload: %v", err)
	}
}
