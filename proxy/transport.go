package proxy

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Transport tuning. The idle pool is sized for a gateway that multiplexes many
// clients onto few upstreams: with Go's default of 2 idle connections per
// host, a burst of concurrency closes and redials connections all the time.
const (
	transportMaxIdle        = 1024
	transportMaxIdlePerHost = 512
	transportIdleTimeout    = 90 * time.Second
	transportDialTimeout    = 5 * time.Second
	transportKeepAlive      = 30 * time.Second
	transportTLSTimeout     = 5 * time.Second
	transportExpectTimeout  = 1 * time.Second
	transportMaxRespHeader  = 1 << 20
)

// NewStandardTransport returns net/http's transport as the gateway tunes it:
// the lean transport's fallback, and every upstream's with
// server.upstream_transport: standard. Built once per process, in cmd.
//
// It has no response-header timeout: each route's timeout bounds the wait
// for response headers instead. It ignores HTTP(S)_PROXY from the
// environment, and it does not ask for gzip on its own (DisableCompression),
// so clients get exactly the encoding they negotiated with the upstream.
func NewStandardTransport() *http.Transport {
	return newStandardTransport(NewDialer().DialContext)
}

// NewDialer returns the dialer of upstream connections as the gateway tunes
// it: NewStandardTransport's, and the one cmd gives the lean transport
// (proxy/h1), whose own defaults (idle connections per host, idle timeout,
// response-header bytes) are the standard transport's tuning.
func NewDialer() *net.Dialer {
	return &net.Dialer{Timeout: transportDialTimeout, KeepAlive: transportKeepAlive}
}

// dialFunc opens a connection to an upstream.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

func newStandardTransport(dial dialFunc) *http.Transport {
	return &http.Transport{
		DialContext:            dial,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           transportMaxIdle,
		MaxIdleConnsPerHost:    transportMaxIdlePerHost,
		IdleConnTimeout:        transportIdleTimeout,
		TLSHandshakeTimeout:    transportTLSTimeout,
		ExpectContinueTimeout:  transportExpectTimeout,
		MaxResponseHeaderBytes: transportMaxRespHeader,
		DisableCompression:     true,
	}
}

// UpstreamTransports are the upstream transports of every protocol a route
// may name (routes[].upstream_protocol), built once per process like the
// transport they hold for auto. Their RoundTrip sends a request the
// Handler forwards on its route's. Safe for concurrent use.
type UpstreamTransports struct {
	auto http.RoundTripper
	// http1, h2 and h2c are net/http's, each held to its one protocol.
	http1, h2, h2c *http.Transport
}

// NewUpstreamTransports returns the transports of each upstream protocol:
// auto is the process's transport (proxy/h1's, which cmd builds over
// NewStandardTransport's, or NewStandardTransport's); http1, h2 and h2c
// are net/http's, tuned as NewStandardTransport's and held to HTTP/1.1,
// HTTP/2 over TLS, and HTTP/2 by prior knowledge. Their connections are opened when first used.
func NewUpstreamTransports(auto http.RoundTripper) *UpstreamTransports {
	dial := NewDialer().DialContext
	only := func(set func(*http.Protocols)) *http.Transport {
		t := newStandardTransport(dial)
		t.ForceAttemptHTTP2 = false
		t.Protocols = new(http.Protocols)
		set(t.Protocols)
		return t
	}
	return &UpstreamTransports{
		auto:  auto,
		http1: only(func(p *http.Protocols) { p.SetHTTP1(true) }),
		h2:    only(func(p *http.Protocols) { p.SetHTTP2(true) }),
		h2c:   only(func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }),
	}
}

// CloseIdleConnections closes every transport's idle connections.
func (t *UpstreamTransports) CloseIdleConnections() {
	if c, ok := t.auto.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	for _, tr := range []*http.Transport{t.http1, t.h2, t.h2c} {
		tr.CloseIdleConnections()
	}
}
