package main

import (
	"net/http"
	"slices"

	"github.com/ratelimit-gateway/gateway/policies"
)

// serverProtocols is what a client listener speaks under server.protocols:
// HTTP/1.1, and HTTP/2 over TLS (h2, offered by ALPN) on the TLS listener
// or by prior knowledge (h2c) on a plain one.
func serverProtocols(list []policies.ServerProtocol, overTLS bool) *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(slices.Contains(list, policies.ServerHTTP1))
	if overTLS {
		p.SetHTTP2(slices.Contains(list, policies.ServerH2))
	} else {
		p.SetUnencryptedHTTP2(slices.Contains(list, policies.ServerH2C))
	}
	return &p
}

// alpnProtocols is what the TLS listener offers by ALPN, h2 first when
// server.protocols has it.
func alpnProtocols(list []policies.ServerProtocol) []string {
	if slices.Contains(list, policies.ServerH2) {
		return []string{"h2", "http/1.1"}
	}
	return []string{"http/1.1"}
}

// http2Config is the HTTP/2 server's settings: the stream cap of
// server.max_concurrent_streams. net/http's other protections stay as
// they are: the handlers of one connection never outnumber its stream cap,
// and a connection that resets streams faster than its handlers end
// (rapid reset, CVE-2023-44487) is closed with ENHANCE_YOUR_CALM.
func http2Config(s policies.ServerConfig) *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: s.MaxConcurrentStreams}
}
