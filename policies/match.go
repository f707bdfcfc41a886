package policies

import (
	"net"
	"net/http"
	"slices"
	"strings"
)

// Match returns the first route that takes r, or nil. It compares r.URL.Path
// as it is: the proxy makes the path canonical (dot segments, repeated
// slashes, escapes) before it asks. A compiled snapshot looks its routes up
// in an index (routeIndex); one built by hand is scanned in order.
func (s *Snapshot) Match(r *http.Request) *Route {
	if s.routes != nil {
		return s.routes.match(s.Routes, r)
	}
	return s.scan(r)
}

// scan tries every route in file order: what the index must agree with.
func (s *Snapshot) scan(r *http.Request) *Route {
	for _, rt := range s.Routes {
		if rt.Match.Matches(r) {
			return rt
		}
	}
	return nil
}

// Matches reports whether r satisfies every set field of m.
func (m *Match) Matches(r *http.Request) bool {
	if m.Host != "" && !hostMatches(m.Host, r.Host) {
		return false
	}
	if m.Path != "" && r.URL.Path != m.Path {
		return false
	}
	if m.PathPrefix != "" && !PathHasPrefix(r.URL.Path, m.PathPrefix) {
		return false
	}
	if len(m.Methods) > 0 && !methodMatches(m.Methods, r.Method) {
		return false
	}
	for _, h := range m.Headers {
		vs, ok := r.Header[h.Name] // Name is canonical after compile
		if !ok {
			return false
		}
		if h.Value != "" && !contains(vs, h.Value) {
			return false
		}
	}
	return true
}

// PathHasPrefix matches whole segments when the prefix does not end in "/":
// "/api" matches "/api" and "/api/x" but not "/apix". Route matching and
// the proxy's strip_prefix both use it.
func PathHasPrefix(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}

func hostMatches(pattern, host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return len(host) > len(suffix)+1 && strings.EqualFold(host[len(host)-len(suffix)-1:], "."+suffix)
	}
	return strings.EqualFold(pattern, host)
}

// methodMatches lets a route that takes GET take HEAD too, as net/http and
// most gateways do: a HEAD is a GET without the body, so the GET route's
// policies judge it (otherwise HEAD would walk past them). Methods are
// case-sensitive (RFC 9110 section 9.1): methods holds them as compiled
// (upper case), and the proxy refuses a standard method in another case
// before it asks.
func methodMatches(methods []string, method string) bool {
	if slices.Contains(methods, method) {
		return true
	}
	return method == http.MethodHead && slices.Contains(methods, http.MethodGet)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
