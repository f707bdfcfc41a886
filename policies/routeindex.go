package policies

import "net/http"

// routeIndex finds the routes a request's path can match without trying
// every route: routes are filed under their exact path or their path
// prefix, and a path can only be taken by the routes filed under itself or
// under one of its leading parts (at most two lookups per segment). The
// candidates are then tried with Match.Matches in file order, so the index
// changes how fast the first matching route is found, never which one.
//
// A route with neither path nor path_prefix can take any path; it is in
// every lookup (any). Each list holds route positions in ascending order.
type routeIndex struct {
	exact    map[string][]int // match.path
	prefixes map[string][]int // match.path_prefix, of routes without match.path
	any      []int
	// prefixLen[n] says some prefix is n bytes long; lookups of other
	// lengths are skipped (most cuts of a path are not a prefix).
	prefixLen []bool
}

// minIndexedRoutes is the fewest routes a snapshot indexes: a scan of fewer
// is as fast as the index's lookups.
const minIndexedRoutes = 8

// newRouteIndex files each route of routes under what its match says of
// the path.
func newRouteIndex(routes []*Route) *routeIndex {
	ix := &routeIndex{exact: map[string][]int{}, prefixes: map[string][]int{}}
	for i, rt := range routes {
		switch {
		case rt.Match.Path != "":
			// An exact path is the stronger filter; Matches checks the
			// prefix as well when a route has both.
			ix.exact[rt.Match.Path] = append(ix.exact[rt.Match.Path], i)
		case rt.Match.PathPrefix != "":
			p := rt.Match.PathPrefix
			ix.prefixes[p] = append(ix.prefixes[p], i)
			if len(p) >= len(ix.prefixLen) {
				ix.prefixLen = append(ix.prefixLen, make([]bool, len(p)+1-len(ix.prefixLen))...)
			}
			ix.prefixLen[len(p)] = true
		default:
			ix.any = append(ix.any, i)
		}
	}
	return ix
}

// match returns the first route of routes (in file order) that takes r.
func (ix *routeIndex) match(routes []*Route, r *http.Request) *Route {
	path := r.URL.Path
	best := len(routes)
	// first lowers best to the first route of list before it that takes r.
	first := func(list []int) {
		for _, i := range list {
			if i >= best {
				return
			}
			if routes[i].Match.Matches(r) {
				best = i
				return
			}
		}
	}
	first(ix.any)
	first(ix.exact[path])
	// A prefix P takes path when path is P, when P ends in "/" and starts
	// path, or when path is P followed by "/" and more (PathHasPrefix). So
	// P is path itself, or path cut just before or just after one of its
	// slashes.
	has := func(n int) bool { return n < len(ix.prefixLen) && ix.prefixLen[n] }
	if has(len(path)) {
		first(ix.prefixes[path])
	}
	for i := 0; i < len(path) && i < len(ix.prefixLen); i++ {
		if path[i] != '/' {
			continue
		}
		if i > 0 && has(i) {
			first(ix.prefixes[path[:i]])
		}
		if i+1 < len(path) && has(i+1) {
			first(ix.prefixes[path[:i+1]])
		}
	}
	if best == len(routes) {
		return nil
	}
	return routes[best]
}
