package policies

import (
	"fmt"
	"strings"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// UpstreamProtocol is the protocol the gateway speaks to an upstream
// (routes[].upstream_protocol).
type UpstreamProtocol string

// The upstream protocols.
const (
	// UpstreamAuto: HTTP/1.1 to http:// upstreams, HTTP/2 or HTTP/1.1 as
	// TLS's ALPN negotiates to https:// ones.
	UpstreamAuto UpstreamProtocol = "auto"
	// UpstreamHTTP1: HTTP/1.1 only, over TLS or not.
	UpstreamHTTP1 UpstreamProtocol = "http1"
	// UpstreamH2: HTTP/2 over TLS (https:// only).
	UpstreamH2 UpstreamProtocol = "h2"
	// UpstreamH2C: HTTP/2 without TLS, by prior knowledge (http:// only):
	// what a plain gRPC server speaks.
	UpstreamH2C UpstreamProtocol = "h2c"
)

// UpstreamProtocols lists every upstream protocol.
var UpstreamProtocols = []UpstreamProtocol{UpstreamAuto, UpstreamHTTP1, UpstreamH2, UpstreamH2C}

// UnmarshalText sets p to the protocol named by text, one of
// UpstreamProtocols; empty text leaves the zero value, which defaults to
// UpstreamAuto.
func (p *UpstreamProtocol) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(p, UpstreamProtocols, text)
}

// MarshalText returns the protocol's name.
func (p UpstreamProtocol) MarshalText() ([]byte, error) { return []byte(p), nil }

// Auto reports whether p is auto; the zero value is too.
func (p UpstreamProtocol) Auto() bool { return p == UpstreamAuto || p == "" }

// Fits returns an error when p cannot reach an upstream of scheme: h2
// needs TLS (https), h2c its absence (http).
func (p UpstreamProtocol) Fits(scheme string) error {
	switch {
	case p == UpstreamH2 && scheme != "https":
		return fmt.Errorf("h2 is HTTP/2 over TLS and needs an https:// upstream (h2c is HTTP/2 without TLS), got %s://", scheme)
	case p == UpstreamH2C && scheme != "http":
		return fmt.Errorf("h2c is HTTP/2 without TLS and needs an http:// upstream (h2 is HTTP/2 over TLS), got %s://", scheme)
	}
	return nil
}

// upstreamScheme is the scheme of a route's upstream as written: https for
// https://, http for the rest (a built-in upstream is plain HTTP; a
// malformed one is upstream's own error).
func upstreamScheme(upstream string) string {
	if len(upstream) >= 8 && strings.EqualFold(upstream[:8], "https://") {
		return "https"
	}
	return "http"
}

// ServerProtocol is a protocol the gateway speaks to its clients
// (server.protocols).
type ServerProtocol string

// The client protocols.
const (
	// ServerHTTP1: HTTP/1.1 (and 1.0) on every listener.
	ServerHTTP1 ServerProtocol = "http1"
	// ServerH2: HTTP/2 over TLS, offered by ALPN on a TLS listener.
	ServerH2 ServerProtocol = "h2"
	// ServerH2C: HTTP/2 without TLS, by prior knowledge, on the plain
	// listeners (server.listen without TLS, server.tls.plain_listen).
	ServerH2C ServerProtocol = "h2c"
)

// ServerProtocols lists every client protocol.
var ServerProtocols = []ServerProtocol{ServerHTTP1, ServerH2, ServerH2C}

// DefaultMaxConcurrentStreams is server.max_concurrent_streams when absent:
// net/http's own cap.
const DefaultMaxConcurrentStreams = 250

// DefaultServerProtocols is server.protocols when absent: HTTP/1.1, and
// HTTP/2 where TLS negotiates it; h2c is opt-in.
var DefaultServerProtocols = []ServerProtocol{ServerHTTP1, ServerH2}

// UnmarshalText sets p to the protocol named by text, one of
// ServerProtocols.
func (p *ServerProtocol) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(p, ServerProtocols, text)
}

// MarshalText returns the protocol's name.
func (p ServerProtocol) MarshalText() ([]byte, error) { return []byte(p), nil }

// GRPCLimitStatus is the gRPC status of a rate-limit refusal of a gRPC
// call (routes[].grpc_limit_status).
type GRPCLimitStatus string

// The gRPC statuses of a rate-limit refusal.
const (
	// GRPCResourceExhausted is status 8, RESOURCE_EXHAUSTED: what the
	// gRPC spec names for a rate limit; clients do not retry it unless told.
	GRPCResourceExhausted GRPCLimitStatus = "resource_exhausted"
	// GRPCUnavailable is status 14, UNAVAILABLE, which Envoy's rate limit
	// answers and clients with a retry policy retry.
	GRPCUnavailable GRPCLimitStatus = "unavailable"
)

// GRPCLimitStatuses lists every gRPC status of a rate-limit refusal.
var GRPCLimitStatuses = []GRPCLimitStatus{GRPCResourceExhausted, GRPCUnavailable}

// UnmarshalText sets s to the status named by text, one of
// GRPCLimitStatuses; empty text leaves the zero value, which defaults to
// GRPCResourceExhausted.
func (s *GRPCLimitStatus) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(s, GRPCLimitStatuses, text)
}

// MarshalText returns the status's name.
func (s GRPCLimitStatus) MarshalText() ([]byte, error) { return []byte(s), nil }

// validateProtocols checks server.protocols and server.max_concurrent_streams.
func validateProtocols(p *problems, s *ServerConfig) {
	seen := map[ServerProtocol]bool{}
	for i, proto := range s.Protocols {
		if seen[proto] {
			p.addf(fmt.Sprintf("server.protocols[%d]", i), "%s is listed twice", proto)
		}
		seen[proto] = true
	}
	if !seen[ServerHTTP1] {
		p.add("server.protocols", "must include http1: every listener serves HTTP/1.1")
	}
	if s.MaxConcurrentStreams < 1 {
		p.addf("server.max_concurrent_streams", "must be ≥ 1, got %d", s.MaxConcurrentStreams)
	}
}
