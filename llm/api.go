package llm

import (
	"strings"
)

// API is a provider's HTTP API as the gateway knows it: the endpoints it
// declares, each with how a call's cost is bounded before it is forwarded
// and settled after. An endpoint it does not declare is unknown, and on a
// route that counts tokens it is refused: providers add endpoints every
// month, and what the gateway was not taught it cannot bound. An API is a
// value; it is never changed once built, and is safe for concurrent use.
type API struct {
	// Name is the provider API's name as routes[].llm names it.
	Name string
	// Endpoints are looked up in order: the first whose method and path
	// match a request is its endpoint.
	Endpoints []Endpoint
}

// Bound is how an endpoint's cost is bounded before a call is forwarded,
// and how the call is settled from the answer.
type Bound uint8

const (
	// BoundFree: the endpoint bills nothing (a read, a free call); its
	// body is not read, and it takes one from each policy, as any request.
	BoundFree Bound = iota
	// BoundTokens: the body is read by its Kind; the call reserves its
	// prompt's tokens plus its output cap and is settled from the usage
	// its answer carries.
	BoundTokens
	// BoundFixed: a cost per call the operator declared (Endpoint.Tokens,
	// Endpoint.MicroUSD), reserved and charged as declared; the operator
	// owns the bound.
	BoundFixed
)

// Endpoint is one endpoint an API declares.
type Endpoint struct {
	// Method is the request's method, upper case; "*" matches any.
	Method string
	// Path is the path pattern, as the upstream receives it: literal
	// segments, "{name}" for any one segment, and a last "{name...}" for
	// one or more.
	Path string
	// Kind reads the body and the usage of a BoundTokens endpoint.
	Kind Kind
	// Bound is how a call's cost is bounded and settled.
	Bound Bound
	// Refused, when set, says why a route that counts tokens refuses the
	// endpoint (403): what it bills cannot be bounded from its request.
	Refused string
	// Stored marks a read (or write) of objects the provider stores under
	// the key that made them: refused on a route whose upstream_api_key
	// every tenant shares, since through it any tenant reads every
	// tenant's objects.
	Stored bool
	// MaxBody, when > 0, is the endpoint's own body limit, in place of
	// the route's max_body_bytes: an upload's.
	MaxBody int64
	// Tokens and MicroUSD are a BoundFixed endpoint's cost per call.
	Tokens, MicroUSD int64
}

// Lookup returns the endpoint of a request of method to path (as the
// upstream receives it), nil when the API declares none. It allocates
// nothing.
func (a *API) Lookup(method, path string) *Endpoint {
	if a == nil {
		return nil
	}
	for i := range a.Endpoints {
		e := &a.Endpoints[i]
		if (e.Method == "*" || e.Method == method) && MatchPath(e.Path, path) {
			return e
		}
	}
	return nil
}

// With returns a copy of a whose first endpoints are extra: an operator's
// declarations win over the API's own.
func (a *API) With(extra []Endpoint) *API {
	if len(extra) == 0 {
		return a
	}
	out := &API{Name: a.Name, Endpoints: make([]Endpoint, 0, len(extra)+len(a.Endpoints))}
	out.Endpoints = append(append(out.Endpoints, extra...), a.Endpoints...)
	return out
}

// MatchPath reports whether path matches the pattern (see Endpoint.Path).
// Segments are compared whole: "/v1/threads/x/messages" never matches
// "/v1/messages", and a trailing slash is a segment of its own.
func MatchPath(pattern, path string) bool {
	for {
		if pattern == "" || path == "" {
			return pattern == "" && path == ""
		}
		if pattern[0] != '/' || path[0] != '/' {
			return false
		}
		var ps, ss string
		ps, pattern = segment(pattern[1:])
		ss, path = segment(path[1:])
		switch {
		case strings.HasPrefix(ps, "{") && strings.HasSuffix(ps, "...}"):
			return ss != ""
		case strings.HasPrefix(ps, "{") && strings.HasSuffix(ps, "}"):
			if ss == "" {
				return false
			}
		case ps != ss:
			return false
		}
	}
}

// segment splits s at its first slash: the segment before it, and the rest
// from the slash on.
func segment(s string) (seg, rest string) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// Segment is the segment of path (as the upstream receives it) that the
// pattern's "{name}" matches, "" when the pattern has none or path does
// not match it.
func Segment(pattern, path, name string) string {
	if !MatchPath(pattern, path) {
		return ""
	}
	want := "{" + name + "}"
	for pattern != "" && path != "" {
		var ps, ss string
		ps, pattern = segment(pattern[1:])
		ss, path = segment(path[1:])
		if ps == want {
			return ss
		}
	}
	return ""
}

// Deployments reports whether a's endpoints name a deployment in their
// path ("{deployment}"): routes[].deployments then maps each to the model
// its calls are counted and priced as.
func (a *API) Deployments() bool {
	for _, e := range a.Endpoints {
		if strings.Contains(e.Path, "/{deployment}/") {
			return true
		}
	}
	return false
}

// ValidPattern reports whether p is a path pattern Lookup understands.
func ValidPattern(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		open, close := strings.Contains(s, "{"), strings.Contains(s, "}")
		switch {
		case s == "" && i < len(segs)-1:
			return false
		case !open && !close:
		case !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") || len(s) < 3:
			return false
		case strings.HasSuffix(s, "...}") && i != len(segs)-1:
			return false
		}
	}
	return true
}
