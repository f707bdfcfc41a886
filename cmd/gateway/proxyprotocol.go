package main

import (
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/ratelimit-gateway/gateway/policies"
)

// acceptProxyProtocol wraps ln (server.proxy_protocol): a peer in
// server.trusted_proxies of the config in force may open a connection with
// a PROXY protocol header, v1 or v2, whose source address is then the
// connection's client (a TCP balancer cannot add X-Forwarded-For to TLS it
// does not terminate). From any other peer a header is refused: the
// connection is closed unanswered, so no client names its own address.
// A trusted peer's connection without a header is its own, as a balancer's
// health check is.
func acceptProxyProtocol(ln net.Listener, current *policies.Current, headerTimeout time.Duration) net.Listener {
	return &proxyproto.Listener{
		Listener:          ln,
		ReadHeaderTimeout: headerTimeout,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			if trustedPeer(current.Load(), o.Upstream) {
				return proxyproto.USE, nil
			}
			return proxyproto.REJECT, nil
		},
	}
}

// trustedPeer reports whether addr is in snap's server.trusted_proxies.
func trustedPeer(snap *policies.Snapshot, addr net.Addr) bool {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil || snap == nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range snap.Identity.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
