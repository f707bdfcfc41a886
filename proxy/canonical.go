package proxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/ratelimit-gateway/gateway/policies"
)

// The gateway judges and forwards one canonical request. It is computed once,
// before the route is matched, and it is what the route's match, the keys,
// strip_prefix and the upstream all see:
//
//   - the path: percent-encoded unreserved characters decoded (%2E is ".",
//     %61 is "a"), other escapes in upper case, repeated slashes collapsed,
//     "." and ".." segments resolved. What cannot be made canonical without
//     guessing how the upstream reads it is refused with 400: an encoded
//     slash (%2F) or a backslash (raw or %5C), a control character (%00-%1F,
//     %7F), ".." above the root, a dot segment with parameters ("..;x"), an
//     encoded ";" (%3B). Path parameters (";" in a segment, as in
//     /payments;jsessionid=x) are refused too, since Tomcat, Jetty and
//     Spring dispatch /payments;x as /payments while the route would match
//     it as another path; server.path_parameters: strip removes them
//     instead, and the path without them is matched and forwarded.
//   - the query: as ReverseProxy would forward it (a query with ";" or a bad
//     escape is re-encoded, dropping the pairs Go cannot parse).
//   - the headers: hop-by-hop headers (those named in Connection and the
//     standard list) removed as ReverseProxy removes them; URL-override
//     headers removed; and, from a peer that is not a trusted proxy, the
//     headers that carry a client address (X-Forwarded-*, Forwarded,
//     X-Real-IP, True-Client-IP, ...) in every spelling ("_" for "-").
//   - the method: a standard method spelt in another case ("post") is
//     refused, in the route's error shape (see fitToRoute), so that every
//     step reads one method.

// headerKind is what a request header is to the gateway, by its name as
// upstreams read it (spelledAs).
type headerKind uint8

const (
	plainHeader headerKind = iota
	// clientAddrHeader carries a client's address as some proxy or CDN
	// saw it. Only a trusted proxy may set one, under its own name; from
	// anyone else, or spelt with "_", it is dropped, so the upstream (and
	// a policy keyed on it) cannot be told a made-up address.
	clientAddrHeader
	// urlOverrideHeader names another target than the request line's
	// (IIS, Symfony, Zend): the upstream would serve a path the gateway
	// never judged. Dropped from every peer.
	urlOverrideHeader
	// methodOverrideHeader names another method (Rails, Laravel, Express's
	// method-override, ASP.NET): dropped, unless the route names it in
	// method_override, which makes it the method every step reads.
	methodOverrideHeader
)

// kindOf is the kind of a header whose name, as upstreams read it, is as
// (canonical). Every X-Forwarded-* name is a client address header. A
// switch, not a map: it is asked of every header of every request, and
// compares lengths before bytes where a map hashes each name.
func kindOf(as string) headerKind {
	switch as {
	case "Forwarded", "X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Client-Ip", "Cf-Connecting-Ip",
		"Fastly-Client-Ip", "X-Cluster-Client-Ip", "X-Originating-Ip", "X-Remote-Ip", "X-Remote-Addr",
		"Forwarded-For", "X-Forwarded":
		return clientAddrHeader
	case "X-Original-Url", "X-Rewrite-Url":
		return urlOverrideHeader
	case "X-Http-Method-Override", "X-Http-Method", "X-Method-Override":
		return methodOverrideHeader
	}
	if strings.HasPrefix(as, "X-Forwarded-") {
		return clientAddrHeader
	}
	return plainHeader
}

// spelledAs is name as a CGI-style upstream reads it (PHP, WSGI, Rack:
// HTTP_X_FORWARDED_FOR): "_" read as "-", letters in any case. Both
// servers canonicalize the case of a name already, so a name without "_"
// is itself.
func spelledAs(name string) string {
	if strings.IndexByte(name, '_') < 0 {
		return name
	}
	return http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-"))
}

// canonicalRequest returns r in canonical form under snap (r itself when
// it already is), or the reason it cannot be made canonical. peer is r's
// socket peer (parseHop of its RemoteAddr, parsed once per request).
func canonicalRequest(r *http.Request, snap *policies.Snapshot, peer netip.Addr) (*http.Request, string) {
	if r.Method == http.MethodConnect {
		// An authority-form target has no path to match; it would otherwise
		// read as "/" and take the catch-all route.
		return nil, "the gateway does not tunnel CONNECT requests"
	}
	params := rejectParams
	if snap.StripPathParameters {
		params = stripParams
	}
	escaped := r.URL.EscapedPath()
	esc, dec, bad := canonicalPath(escaped, params)
	if bad != "" {
		return nil, bad
	}
	query := cleanQuery(r.URL.RawQuery)
	header := cleanHeader(r.Header, headerRules{
		peerTrusted:         isTrusted(peer, snap.Identity.TrustedProxies),
		keepMethodOverrides: snap.MethodOverrides,
	})
	if dec == r.URL.Path && esc == escaped && query == r.URL.RawQuery && header == nil {
		return r, ""
	}
	out := new(http.Request)
	*out = *r
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = dec, esc, query
	if esc == (&url.URL{Path: dec}).EscapedPath() {
		u.RawPath = ""
	}
	out.URL = &u
	if header != nil {
		out.Header = header
	}
	return out, ""
}

// pathParams is what canonicalPath does with a segment's parameters.
type pathParams int

const (
	rejectParams pathParams = iota // refuse the path
	stripParams                    // drop them: "/a;x/b" is "/a/b"
)

// canonicalPath makes an escaped path canonical (see above). It returns the
// escaped and decoded forms, or why it refuses.
func canonicalPath(p string, params pathParams) (esc, dec, bad string) {
	if p == "" {
		return "/", "/", ""
	}
	if p[0] != '/' {
		return "", "", fmt.Sprintf("the request target must be a path starting with \"/\", got %q", p)
	}
	if isCanonical(p) {
		return p, p, "" // no escape in it: decoded, it is itself
	}
	var segs []string
	trailing := false
	for _, raw := range strings.Split(p[1:], "/") {
		seg, why := normalizeSegment(raw)
		if why != "" {
			return "", "", why
		}
		if strings.HasPrefix(seg, ".;") || strings.HasPrefix(seg, "..;") {
			return "", "", fmt.Sprintf("the path has a dot segment with parameters (%q), which upstreams read in different ways", seg)
		}
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			if params == rejectParams {
				return "", "", fmt.Sprintf("the path has parameters (%q), which upstreams such as Tomcat, Jetty and Spring drop before dispatching; "+
					"send the path without them", seg[i:])
			}
			seg = seg[:i]
		}
		trailing = false
		switch {
		case seg == "" || seg == ".":
			trailing = true
		case seg == "..":
			if len(segs) == 0 {
				return "", "", `the path climbs above the root with ".."`
			}
			segs = segs[:len(segs)-1]
			trailing = true
		default:
			segs = append(segs, seg)
		}
	}
	esc = "/" + strings.Join(segs, "/")
	if trailing && len(segs) > 0 {
		esc += "/"
	}
	dec, err := url.PathUnescape(esc)
	if err != nil {
		return "", "", "the path has a malformed escape"
	}
	return esc, dec, ""
}

// isCanonical is the fast path: no escape, no backslash, no parameters, no
// empty segment before the end and no segment starting with a dot.
func isCanonical(p string) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%', '\\', ';':
			return false
		case '/':
			if i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.') {
				return false
			}
		}
	}
	return true
}

// normalizeSegment decodes escaped unreserved characters in one escaped
// segment and upper-cases the other escapes.
func normalizeSegment(s string) (string, string) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '\\') < 0 {
		return s, ""
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			return "", `the path has a backslash (\ or %5C), which some upstreams read as "/"`
		case c != '%':
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", "the path has a malformed escape"
		}
		v := unhex(s[i+1])<<4 | unhex(s[i+2])
		i += 2
		switch {
		case v == '/':
			return "", "the path has an encoded slash (%2F), which upstreams read either as a separator or as data"
		case v == '\\':
			return "", `the path has a backslash (\ or %5C), which some upstreams read as "/"`
		case v == ';':
			return "", `the path has an encoded ";" (%3B), which upstreams read either as data or as the start of path parameters`
		case v < 0x20 || v == 0x7f:
			return "", fmt.Sprintf("the path has a control character (%%%02X)", v)
		case isUnreserved(v):
			b.WriteByte(v)
		default:
			const hex = "0123456789ABCDEF"
			b.WriteByte('%')
			b.WriteByte(hex[v>>4])
			b.WriteByte(hex[v&15])
		}
	}
	return b.String(), ""
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

// maxQueryParams is net/url's default limit; ReverseProxy re-encodes a query
// with more.
const maxQueryParams = 10000

// cleanQuery is ReverseProxy's own cleaning of the outbound query, done
// before judging so that a query key is read from what is forwarded.
func cleanQuery(s string) string {
	reencode := func(s string) string {
		v, _ := url.ParseQuery(s)
		return v.Encode()
	}
	if strings.Count(s, "&")+1 > maxQueryParams {
		return reencode(s)
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return reencode(s)
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return reencode(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

// headerRules say which headers cleanHeader removes besides hop-by-hop
// and URL-override ones.
type headerRules struct {
	// peerTrusted keeps the client address headers a trusted proxy sent
	// under their own names.
	peerTrusted bool
	// keepMethodOverrides leaves method-override headers for the route to
	// judge (fitToRoute): some route names one in method_override.
	keepMethodOverrides bool
}

// cleanHeader returns h without hop-by-hop headers, URL-override headers,
// client address headers from a peer that is not trusted and, from any
// peer, client address headers spelt with "_", and without
// method-override headers unless rules keep them; nil when there is
// nothing to remove. It ends as ReverseProxy's own removal does: an
// upgrade keeps "Connection: Upgrade" and its Upgrade header, "Te:
// trailers" stays, so ReverseProxy's pass changes nothing more.
func cleanHeader(h http.Header, rules headerRules) http.Header {
	dirty := false
	for name := range h {
		if rules.drop(name) {
			dirty = true
			break
		}
	}
	if !dirty {
		return nil
	}
	out := h.Clone()
	upgrade := ""
	if headerHasToken(h["Connection"], "upgrade") {
		upgrade = h.Get("Upgrade")
	}
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out.Del(name)
			}
		}
	}
	for name := range out {
		if rules.drop(name) {
			delete(out, name)
		}
	}
	if headerHasToken(h["Te"], "trailers") {
		out["Te"] = []string{"trailers"}
	}
	if upgrade != "" {
		out["Connection"] = []string{"Upgrade"}
		out["Upgrade"] = []string{upgrade}
	}
	return out
}

// isHop says name is removed on every hop (RFC 7230 section 6.1 and the
// older list ReverseProxy keeps removing), or is HTTP2-Settings, which
// belongs to an upgrade to h2c (RFC 7540 section 3.2.1) and to one
// connection.
func isHop(name string) bool {
	switch name {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings":
		return true
	}
	return false
}

// drop says cleanHeader removes the header name.
func (rules headerRules) drop(name string) bool {
	if isHop(name) {
		return true
	}
	as := spelledAs(name)
	switch kindOf(as) {
	case clientAddrHeader:
		return !rules.peerTrusted || as != name
	case urlOverrideHeader:
		return true
	case methodOverrideHeader:
		return !rules.keepMethodOverrides
	}
	return false
}

// headerHasToken reports whether a comma-separated header holds token
// (case-insensitive).
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
