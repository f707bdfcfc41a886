package proxy

import (
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// endpoint finds an llm request's endpoint in its route's provider API,
// by the path the upstream will receive (strip_prefix, then the
// upstream's own path), never by how the path ends. On a route that
// counts tokens it also refuses what the API does not declare (404) and
// what it declares refused (403), before anything reaches the upstream or
// carries the operator's key; on other routes every request goes on as
// before, and only a declared call is read as one.
func endpoint(r *http.Request, route *policies.Route) (*llm.Endpoint, answer) {
	ep := routeAPI(route).Lookup(r.Method, upstreamPath(route, r.URL.Path))
	if !countsTokens(route) {
		return ep, answer{}
	}
	what := r.Method + " " + r.URL.Path
	switch {
	case ep == nil:
		return nil, answer{status: http.StatusNotFound, msg: what + " is no endpoint the " + apiName(route) +
			" API declares: this route counts tokens, and what an unknown endpoint bills cannot be bounded"}
	case ep.Refused != "":
		return nil, answer{status: http.StatusForbidden, msg: what + " is refused on this route: " + ep.Refused}
	case ep.Stored && route.UpstreamAPIKey != "":
		return nil, answer{status: http.StatusForbidden, msg: what + " is refused on this route: it reaches objects the provider stores under the route's upstream key, which every tenant shares"}
	}
	return ep, answer{}
}

// isCall reports whether a request to ep on route costs more than one
// request: its body is read and its cost reserved and settled. On a route
// that counts no tokens only the text APIs are read (for a key on the
// model), as before endpoints were declared.
func isCall(ep *llm.Endpoint, route *policies.Route) bool {
	switch {
	case ep == nil || ep.Refused != "":
		return false
	case !countsTokens(route):
		return ep.Bound == llm.BoundFixed || ep.Bound == llm.BoundTokens && ep.Kind <= llm.AnthropicMessages
	}
	return ep.Bound == llm.BoundTokens || ep.Bound == llm.BoundFixed
}

// bodyLimit is the body limit of a request to path on route: on a route
// that counts tokens, its endpoint's own where it declares one (an
// upload's), else the route's max_body_bytes.
func bodyLimit(route *policies.Route, method, path string) int64 {
	if route.Provider != nil && countsTokens(route) {
		if ep := routeAPI(route).Lookup(method, upstreamPath(route, path)); ep != nil && ep.MaxBody > 0 {
			return ep.MaxBody
		}
	}
	return route.MaxBodyBytes
}

func apiName(route *policies.Route) string { return routeAPI(route).Name }

// routeAPI is an llm route's provider API. A snapshot built by hand (in
// tests) may leave Route.API unset: it is then its provider's own, as the
// compiler would have set it.
func routeAPI(route *policies.Route) *llm.API {
	switch {
	case route.API != nil:
		return route.API
	case route.Provider != nil:
		return route.Provider.API()
	}
	return llm.OpenAI
}

// upstreamPath is the path the upstream receives for a request to path,
// as rewrite makes it: strip_prefix, then joined to the upstream's path
// as httputil.ProxyRequest.SetURL joins them.
func upstreamPath(route *policies.Route, path string) string {
	if p := route.StripPrefix; p != "" && policies.PathHasPrefix(path, p) {
		path = withSlash(path[len(p):])
	}
	base := ""
	if route.Upstream != nil {
		base = route.Upstream.Path
	}
	switch a, b := strings.HasSuffix(base, "/"), strings.HasPrefix(path, "/"); {
	case a && b:
		return base + path[1:]
	case !a && !b:
		return base + "/" + path
	}
	return base + path
}
