package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
)

// viaProxyProtocol opens a connection to addr, writes header (nil: none)
// and a GET, and returns the response, or the error of reading it.
func viaProxyProtocol(t *testing.T, addr string, header *proxyproto.Header) (*http.Response, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if header != nil {
		if _, err := header.WriteTo(conn); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(conn, "GET /ip HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n"); err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(conn), nil)
}

// forwardedFor is the X-Forwarded-For the echo upstream was sent.
func forwardedFor(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var echo struct{ Headers http.Header }
	if err := json.NewDecoder(resp.Body).Decode(&echo); err != nil {
		t.Fatal(err)
	}
	return echo.Headers.Get("X-Forwarded-For")
}

func proxyHeader(version byte) *proxyproto.Header {
	return &proxyproto.Header{
		Version:           version,
		Command:           proxyproto.PROXY,
		TransportProtocol: proxyproto.TCPv4,
		SourceAddr:        &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 40000},
		DestinationAddr:   &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080},
	}
}

func proxyProtocolConfig(trusted, clientServer string) string {
	return `server:
  listen: 127.0.0.1:0
  proxy_protocol: true
  client_server: ` + clientServer + `
  trusted_proxies: [` + trusted + `]
admin: {listen: ""}
routes:
  - {name: api, upstream: "builtin:echo"}
`
}

func TestProxyProtocolFromATrustedPeer(t *testing.T) {
	for _, server := range []string{"lean", "standard"} {
		t.Run(server, func(t *testing.T) {
			g := startGateway(t, "proxyproto", writePressureConfig(t, proxyProtocolConfig("127.0.0.1/32", server)))
			addr := strings.TrimPrefix(g.base, "http://")
			for _, version := range []byte{1, 2} {
				resp, err := viaProxyProtocol(t, addr, proxyHeader(version))
				if err != nil {
					t.Fatalf("v%d: %v", version, err)
				}
				if got := forwardedFor(t, resp); got != "203.0.113.7" {
					t.Errorf("v%d: the upstream saw X-Forwarded-For %q, want the header's source 203.0.113.7", version, got)
				}
			}
			// The balancer's own connection (a health check) needs no header.
			resp, err := viaProxyProtocol(t, addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := forwardedFor(t, resp); got != "127.0.0.1" {
				t.Errorf("no header: X-Forwarded-For %q, want the peer 127.0.0.1", got)
			}
		})
	}
}

func TestProxyProtocolFromAnUntrustedPeerIsRefused(t *testing.T) {
	g := startGateway(t, "proxyproto-untrusted", writePressureConfig(t, proxyProtocolConfig("10.0.0.0/8", "lean")))
	addr := strings.TrimPrefix(g.base, "http://")
	for _, version := range []byte{1, 2} {
		resp, err := viaProxyProtocol(t, addr, proxyHeader(version))
		if err == nil {
			got := forwardedFor(t, resp)
			t.Fatalf("v%d from an untrusted peer: answered %d (X-Forwarded-For %q), want the connection closed unanswered", version, resp.StatusCode, got)
		}
	}
	// Without a header it is an ordinary client.
	resp, err := viaProxyProtocol(t, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := forwardedFor(t, resp); got != "127.0.0.1" {
		t.Errorf("no header: X-Forwarded-For %q, want 127.0.0.1", got)
	}
}

// TestProxyProtocolBeforeTLS: the header comes before the TLS handshake, as
// a TCP balancer in front of a TLS listener sends it.
func TestProxyProtocolBeforeTLS(t *testing.T) {
	site := newTLSSite(t)
	g := startGateway(t, "proxyproto-tls", site.config(t, "  proxy_protocol: true\n  trusted_proxies: [127.0.0.1/32]", ""))
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := proxyHeader(2).WriteTo(conn); err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: site.ca.Pool(), ServerName: "default.test"})
	if _, err := io.WriteString(tc, "GET /ip HTTP/1.1\r\nHost: default.test\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := forwardedFor(t, resp); got != "203.0.113.7" {
		t.Errorf("X-Forwarded-For %q, want the header's source 203.0.113.7", got)
	}
}
