package policies

import (
	"net"
	"net/http"
	"strings"
)

// Match returns the first route that takes r, or nil.
func (s *Snapshot) Match(r *http.Request) *Route {
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
	if len(m.Methods) > 0 && !containsFold(m.Methods, r.Method) {
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

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
