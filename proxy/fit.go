package proxy

import (
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/ratelimit-gateway/gateway/policies"
)

// Once its route is known, a canonical request is fitted to it (fitToRoute)
// so that every later step, and the upstream, reads it one way:
//
//   - a header some route's match.headers reads has one value: sent twice
//     with different values (a case other than canonical is the same
//     name), or spelt with "_" for "-", it is refused, since the route
//     would be matched on one copy and the upstream may read another;
//   - the route's method_override header, when it names one, becomes the
//     method (route, idempotency, llm accounting, keys and forwarding all
//     read it) and is not forwarded; the request must still match the
//     same route. Every other method-override header is dropped (by
//     cleanHeader already when no route names one);
//   - an Upgrade to a protocol the route's upgrades do not name (h2c,
//     which curl --http2 offers on every request) is dropped, so that no
//     upstream can turn the connection into a tunnel past the limits.

// standardMethods are the methods RFC 9110 and RFC 5789 define.
var standardMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

// methodProblem says why the gateway will not read method as sent, or "":
// methods are case-sensitive (RFC 9110 section 9.1), but route matching
// once ignored case and many upstreams (Werkzeug, Django) upper-case them,
// so "post" would be served as POST without being judged as one.
func methodProblem(method string) string {
	up := strings.ToUpper(method)
	if up == method {
		return ""
	}
	for _, m := range standardMethods {
		if m == up {
			return fmt.Sprintf("method %q is not %s: methods are case-sensitive; send %s", method, up, up)
		}
	}
	return ""
}

// withMethod is a shallow copy of r with another method.
func withMethod(r *http.Request, method string) *http.Request {
	out := new(http.Request)
	*out = *r
	out.Method = method
	return out
}

// fitToRoute returns r fitted to route (see above), or why it is refused.
func fitToRoute(r *http.Request, snap *policies.Snapshot, route *policies.Route) (*http.Request, string) {
	if msg := matchHeaderProblem(r.Header, snap.MatchHeaders); msg != "" {
		return nil, msg
	}
	var header http.Header // r's, copied once something changes
	edit := func() http.Header {
		if header == nil {
			header = r.Header.Clone()
		}
		return header
	}
	method := r.Method
	if snap.MethodOverrides { // else cleanHeader dropped every method-override header
		for name, vs := range r.Header {
			as := spelledAs(name)
			if kindOf(as) != methodOverrideHeader && (route.MethodOverride == "" || as != route.MethodOverride) {
				continue
			}
			if name == route.MethodOverride {
				m, msg := overrideMethod(name, vs)
				if msg != "" {
					return nil, msg
				}
				method = m
			}
			delete(edit(), name)
		}
	}
	if up := r.Header["Upgrade"]; len(up) > 0 {
		if kept := allowedUpgrades(up, route.Upgrades); kept != strings.Join(up, ", ") {
			h := edit()
			if kept == "" {
				delete(h, "Upgrade")
				delete(h, "Connection")
			} else {
				h["Upgrade"] = []string{kept}
			}
		}
	}
	if header == nil && method == r.Method {
		return r, ""
	}
	out := withMethod(r, method)
	if header != nil {
		out.Header = header
	}
	if method != r.Method && snap.Match(out) != route {
		return nil, fmt.Sprintf("%s: %s takes this request off route %q, which names the header; send the method itself", route.MethodOverride, method, route.Name)
	}
	return out, ""
}

// overrideMethod reads a method_override header's values.
func overrideMethod(name string, vs []string) (string, string) {
	if len(vs) != 1 {
		return "", fmt.Sprintf("header %q appears %d times; the method it overrides with must be sent once", name, len(vs))
	}
	m := strings.TrimSpace(vs[0])
	switch {
	case !httpguts.ValidHeaderFieldName(m): // a token, as a method is
		return "", fmt.Sprintf("header %q must hold a method, got %q", name, m)
	case methodProblem(m) != "":
		return "", name + ": " + methodProblem(m)
	case m == http.MethodConnect:
		return "", "the gateway does not tunnel CONNECT requests"
	}
	return m, ""
}

// matchHeaderProblem says why h does not give each header routes are
// matched on (names, canonical) one value, or "".
func matchHeaderProblem(h http.Header, names []string) string {
	if len(names) == 0 {
		return ""
	}
	for name := range h {
		if strings.IndexByte(name, '_') < 0 {
			continue
		}
		for _, n := range names {
			if spelledAs(name) == n {
				return fmt.Sprintf("header %q is read as %q by some upstreams, and routes are matched on %s: send it once, as %s", name, n, n, n)
			}
		}
	}
	for _, n := range names {
		vs := h[n]
		for _, v := range vs[min(1, len(vs)):] {
			if v != vs[0] {
				return fmt.Sprintf("header %q appears %d times with different values; a header routes are matched on must have one value", n, len(vs))
			}
		}
	}
	return ""
}

// allowedUpgrades is the protocols of an Upgrade header that allowed (lower
// case names) holds, as sent, joined by ", "; "" for none.
func allowedUpgrades(values []string, allowed []string) string {
	var kept []string
	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			name, _, _ := strings.Cut(p, "/") // websocket, or h2c; a version after "/"
			for _, a := range allowed {
				if strings.EqualFold(name, a) {
					kept = append(kept, p)
					break
				}
			}
		}
	}
	return strings.Join(kept, ", ")
}
