package proxy

import (
	"iter"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// defaultKeyHeader carries the API key when the snapshot names no header.
const defaultKeyHeader = "X-API-Key"

// Identify works out who is asking on route (nil for none): the client
// address (see resolveClient), its network as configured by snap.Identity,
// the presented API key and its tenant. It reads r and snap only and is safe
// for concurrent use.
// A JWT is verified with tenants.jwt's HMAC secret only: Identify has no
// signing keys.
func Identify(r *http.Request, snap *policies.Snapshot, route *policies.Route) policies.Subject {
	s, _ := identify(r, snap, route, nil)
	return s
}

// keyHeaders are where route's requests carry their API key, in the order
// they are read. An llm route reads it where its provider's SDKs send it
// (llm.Provider.KeyHeaders), then in tenants.header; any other route reads
// tenants.header.
func keyHeaders(snap *policies.Snapshot, route *policies.Route) []string {
	header := snap.Tenants.Header
	if header == "" {
		header = defaultKeyHeader
	}
	c := keyHeaderCache.Load()
	if c == nil || c.header != header {
		c = newKeyHeaderLists(header)
		keyHeaderCache.Store(c)
	}
	switch {
	case route == anySDKRoute:
		return c.any
	case route == nil || route.Provider == nil:
		return c.plain
	}
	if i := llm.ProviderIndex(route.Provider); i >= 0 && i < len(c.llm) {
		return c.llm[i]
	}
	return providerKeyHeaders(route.Provider, header)
}

// keyHeaderLists are keyHeaders' answers for one tenants.header, the
// plain one and one per registered provider, kept so that a request does
// not build them again. Their capacity is their length: a caller that
// appends gets a copy.
type keyHeaderLists struct {
	header string
	plain  []string
	llm    [][]string
	// any is every provider's headers, then header: anySDKRoute's.
	any []string
}

// anySDKRoute stands for a request whose key is read wherever any
// provider's SDK sends one (tenants.quota_path).
var anySDKRoute = &policies.Route{}

var keyHeaderCache atomic.Pointer[keyHeaderLists]

func newKeyHeaderLists(header string) *keyHeaderLists {
	c := &keyHeaderLists{header: header, plain: []string{header}}
	for _, p := range llm.Providers() {
		c.llm = append(c.llm, providerKeyHeaders(p, header))
		for _, h := range p.KeyHeaders() {
			if !slices.Contains(c.any, h) {
				c.any = append(c.any, h)
			}
		}
	}
	if h := http.CanonicalHeaderKey(header); !slices.Contains(c.any, h) {
		c.any = append(c.any, h)
	}
	c.any = slices.Clip(c.any)
	return c
}

// providerKeyHeaders are p's key headers, then header when it is not one
// of them.
func providerKeyHeaders(p llm.Provider, header string) []string {
	list := slices.Clone(p.KeyHeaders())
	if h := http.CanonicalHeaderKey(header); !slices.Contains(list, h) {
		list = append(list, h)
	}
	return slices.Clip(list)
}

// identify is Identify that also reports whether the socket peer is a trusted
// proxy (the forwarder then keeps the peer's X-Forwarded-For chain).
func identify(r *http.Request, snap *policies.Snapshot, route *policies.Route, tok *tokens) (s policies.Subject, peerTrusted bool) {
	peer, ok := parseHop(r.RemoteAddr)
	return identifyPeer(r, snap, route, peer, ok, tok)
}

// identifyPeer is identify for a request whose RemoteAddr parseHop parsed
// already (peer, ok). With tenants.jwt, a JWT (see presentedToken) is
// verified by tok, and never looked up as an API key.
func identifyPeer(r *http.Request, snap *policies.Snapshot, route *policies.Route, peer netip.Addr, ok bool, tok *tokens) (s policies.Subject, peerTrusted bool) {
	s.ClientIP, peerTrusted = resolvePeer(r, snap.Identity, peer, ok)
	s.ClientNet = snap.Identity.ClientNet(s.ClientIP)
	if route != nil && readsIP(route.Policies) {
		s.ShareClientKey()
	}
	headers := keyHeaders(snap, route)
	if j := snap.Tenants.JWT; j != nil {
		if t, isJWT := presentedToken(r, j, headers); isJWT {
			tok.identifyToken(&s, j, t)
			return s, peerTrusted
		}
	}
	for _, h := range headers {
		if s.APIKey = apiKey(r, h); s.APIKey != "" {
			break
		}
	}
	if s.APIKey != "" {
		if t, ok := snap.Tenants.Lookup(s.APIKey); ok {
			s.Tenant = &t
			s.Credential = policies.CredentialAPIKey
		}
	} else if t, ok := snap.Tenants.LookupCertificate(r); ok {
		s.Tenant = &t
	}
	return s, peerTrusted
}

// readsIP reports whether a policy of pols is keyed by the client's
// network: the request's policies then share its string, and an llm call
// builds its checks twice (see policies.Subject.ShareClientKey).
func readsIP(pols []*policies.Policy) bool {
	for _, p := range pols {
		if p.Reads.IP {
			return true
		}
	}
	return false
}

// resolveClient returns the address of r's client, and whether the socket
// peer is a trusted proxy. The socket peer is the client
// unless it is in id.TrustedProxies; then the forwarding chain (every
// X-Forwarded-For line, or with id.UseForwarded the Forwarded header) is walked from the right and
// the client is the right-most address that is not trusted, or the left-most
// when all are. A malformed, obfuscated ("_hidden") or "unknown" hop stops the
// walk and the trusted hop to its right (the one that reported it) counts as
// the client: it is the last address we can vouch for, and a client cannot
// forge it. IPv4-mapped IPv6 addresses are unmapped and zones dropped. The
// result is invalid when RemoteAddr is not an address (for example a Unix
// socket).
//
// Only the configured header is read: a client cannot choose its address
// through the other one, which its proxies pass along untouched.
func resolveClient(r *http.Request, id policies.Identity) (client netip.Addr, peerTrusted bool) {
	peer, ok := parseHop(r.RemoteAddr)
	return resolvePeer(r, id, peer, ok)
}

// resolvePeer is resolveClient for a request whose RemoteAddr parseHop
// parsed already (peer, ok).
func resolvePeer(r *http.Request, id policies.Identity, peer netip.Addr, ok bool) (client netip.Addr, peerTrusted bool) {
	if !ok || !isTrusted(peer, id.TrustedProxies) {
		return peer, false
	}
	return forwardedClient(r, id, peer), true
}

// forwardedClient walks the forwarding chain of a request from the trusted
// peer (see resolveClient). A function of its own: the iterator's loop
// puts its variables on the heap, which requests from untrusted peers, the
// flood among them, need not pay for.
func forwardedClient(r *http.Request, id policies.Identity, peer netip.Addr) netip.Addr {
	chain := xffRightToLeft(r.Header["X-Forwarded-For"])
	if id.UseForwarded {
		chain = forwardedRightToLeft(r.Header["Forwarded"])
	}
	client := peer // the last hop we can vouch for
	for hop := range chain {
		addr, ok := parseHop(hop)
		if !ok {
			return client
		}
		client = addr
		if !isTrusted(addr, id.TrustedProxies) {
			return client
		}
	}
	return client
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop parses one hop of a forwarding chain or a RemoteAddr: "1.2.3.4",
// "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:4711".
// Anything else, including "unknown" and obfuscated identifiers, is not ok.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, false
	}
	var a netip.Addr
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 || !validPort(s[end+1:]) {
			return netip.Addr{}, false
		}
		var err error
		if a, err = netip.ParseAddr(s[1:end]); err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
	} else if strings.Count(s, ":") == 1 {
		// IPv4 with a port, as every RemoteAddr of an IPv4 peer is: parsed
		// as such first, since a failed ParseAddr allocates its error.
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	} else if addr, err := netip.ParseAddr(s); err == nil {
		a = addr
	} else {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// validPort accepts "" or ":" followed by 1-5 digits.
func validPort(s string) bool {
	if s == "" {
		return true
	}
	if s[0] != ':' || len(s) < 2 || len(s) > 6 {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// xffRightToLeft yields the entries of X-Forwarded-For header lines from the
// right-most to the left-most without splitting them into a slice first. An
// empty entry ("a,,b") is yielded as "" and so stops the walk.
func xffRightToLeft(lines []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := len(lines) - 1; i >= 0; i-- {
			v := lines[i]
			for {
				comma := strings.LastIndexByte(v, ',')
				if !yield(v[comma+1:]) {
					return
				}
				if comma < 0 {
					break
				}
				v = v[:comma]
			}
		}
	}
}

// forwardedRightToLeft yields the for= values of RFC 7239 Forwarded header
// lines from right to left. An element without exactly one for= parameter, or
// one that does not parse, is yielded as "" so that it stops the walk.
func forwardedRightToLeft(lines []string) iter.Seq[string] {
	var fors []string
	for _, line := range lines {
		for _, elem := range splitUnquoted(line, ',') {
			v, _ := forwardedFor(elem)
			fors = append(fors, v)
		}
	}
	return func(yield func(string) bool) {
		for i := len(fors) - 1; i >= 0; i-- {
			if !yield(fors[i]) {
				return
			}
		}
	}
}

// forwardedFor returns the (unquoted) value of the for parameter of one
// Forwarded element such as `for="[2001:db8::1]:4711";proto=https`.
func forwardedFor(elem string) (string, bool) {
	var val string
	found := false
	for _, pair := range splitUnquoted(elem, ';') {
		name, v, ok := strings.Cut(pair, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		if found {
			return "", false // two for= in one element: ambiguous
		}
		if val, ok = unquote(strings.TrimSpace(v)); !ok {
			return "", false
		}
		found = true
	}
	return val, found
}

// splitUnquoted splits s at sep outside double-quoted strings.
func splitUnquoted(s string, sep byte) []string {
	var parts []string
	inQuote, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case inQuote && c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote removes the quotes and backslash escapes of an RFC 7230
// quoted-string; a token is returned as is.
func unquote(s string) (string, bool) {
	if len(s) == 0 || s[0] != '"' {
		return s, !strings.ContainsAny(s, "\"\\")
	}
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	if !strings.ContainsRune(s, '\\') {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

// apiKey returns the API key carried in header (default X-API-Key). For
// Authorization only the Bearer scheme carries an API key; other schemes
// (Basic, ...) count as no key.
func apiKey(r *http.Request, header string) string {
	if header == "" {
		header = defaultKeyHeader
	}
	v := r.Header.Get(header)
	if strings.EqualFold(header, "Authorization") {
		const bearer = "bearer "
		if len(v) < len(bearer) || !strings.EqualFold(v[:len(bearer)], bearer) {
			return ""
		}
		v = v[len(bearer):]
	}
	return strings.TrimSpace(v)
}
