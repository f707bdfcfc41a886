package policies

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Route and path parts drawn from a small set, so that routes share
// prefixes, paths cut at every kind of place, and the same prefix is
// filed more than once.
var (
	indexSegments = []string{"", "a", "b", "ab", "api", "v1", "x.y", "%2F", "..", " ", "é"}
	indexHosts    = []string{"", "", "", "x.com", "*.x.com", "y.org"}
	indexMethods  = [][]string{nil, nil, {"GET"}, {"POST"}, {"GET", "POST"}}
)

func randomPath(rng *rand.Rand) string {
	var b strings.Builder
	if rng.IntN(10) > 0 {
		b.WriteByte('/')
	}
	for n := rng.IntN(5); n > 0; n-- {
		b.WriteString(indexSegments[rng.IntN(len(indexSegments))])
		if rng.IntN(4) > 0 {
			b.WriteByte('/')
		}
	}
	return b.String()
}

// randomRoutes returns n routes with random matches; about a third have a
// path prefix, a third an exact path, some both, some neither.
func randomRoutes(rng *rand.Rand, n int) []*Route {
	routes := make([]*Route, n)
	for i := range routes {
		m := Match{Host: indexHosts[rng.IntN(len(indexHosts))], Methods: indexMethods[rng.IntN(len(indexMethods))]}
		switch rng.IntN(7) {
		case 0, 1, 2:
			m.PathPrefix = randomPath(rng)
		case 3, 4:
			m.Path = randomPath(rng)
		case 5:
			m.Path, m.PathPrefix = randomPath(rng), randomPath(rng)
		}
		if rng.IntN(8) == 0 {
			m.Headers = []HeaderMatch{{Name: "X-Tier", Value: []string{"", "gold"}[rng.IntN(2)]}}
		}
		routes[i] = &Route{Name: fmt.Sprint("r", i), Match: m}
	}
	return routes
}

func randomRequest(rng *rand.Rand) *http.Request {
	r := &http.Request{
		Method: []string{"GET", "HEAD", "POST", "DELETE"}[rng.IntN(4)],
		URL:    &url.URL{Path: randomPath(rng)},
		Host:   []string{"x.com", "a.x.com", "y.org:8080", "z.net", ""}[rng.IntN(5)],
		Header: http.Header{},
	}
	if rng.IntN(3) == 0 {
		r.Header.Set("X-Tier", []string{"gold", "silver"}[rng.IntN(2)])
	}
	return r
}

func routeName(rt *Route) string {
	if rt == nil {
		return "<none>"
	}
	return rt.Name
}

// TestRouteIndexAgreesWithScan: over thousands of random route tables and
// requests, the index picks exactly the route the scan in file order picks.
func TestRouteIndexAgreesWithScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 1000))
	for cfg := range 2000 {
		routes := randomRoutes(rng, 1+rng.IntN(40))
		snap := &Snapshot{Routes: routes}
		indexed := &Snapshot{Routes: routes, routes: newRouteIndex(routes)}
		for range 100 {
			r := randomRequest(rng)
			// A path made of a route's own match, so that hits are common.
			if rt := routes[rng.IntN(len(routes))]; rng.IntN(2) == 0 {
				r.URL.Path = rt.Match.PathPrefix + rt.Match.Path + []string{"", "/", "/z", "z"}[rng.IntN(4)]
			}
			if got, want := indexed.Match(r), snap.scan(r); got != want {
				t.Fatalf("config %d, %s %q host %q: index gives %s, scan gives %s", cfg, r.Method, r.URL.Path, r.Host, routeName(got), routeName(want))
			}
		}
	}
}

// TestRouteIndexCompiled: Parse builds the index, and a table of 1,000
// prefix routes with a catch-all behind them keeps file order: shadowed
// routes stay shadowed, the catch-all takes what nothing else does.
func TestRouteIndexCompiled(t *testing.T) {
	var b strings.Builder
	b.WriteString("routes:\n")
	b.WriteString("  - {name: early-exact, match: {path: /svc/7/x}, upstream: builtin:echo}\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  - {name: svc-%d, match: {path_prefix: /svc/%d}, upstream: builtin:echo}\n", i, i)
	}
	b.WriteString("  - {name: shadowed, match: {path_prefix: /svc/999/deeper}, upstream: builtin:echo}\n")
	b.WriteString("  - {name: catch-all, match: {path_prefix: /}, upstream: builtin:echo}\n")
	snap := mustParse(t, b.String())
	if snap.routes == nil {
		t.Fatal("Parse built no route index")
	}
	for path, want := range map[string]string{
		"/svc/0":             "svc-0",
		"/svc/999":           "svc-999",
		"/svc/999/deeper/x":  "svc-999",
		"/svc/7/x":           "early-exact",
		"/svc/7/x/y":         "svc-7",
		"/svc/1000":          "catch-all",
		"/svc/99x":           "catch-all",
		"/":                  "catch-all",
		"/svc":               "catch-all",
		"/svc/12/" + "%2F..": "svc-12",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL.Path = path
		if got := snap.Match(r); routeName(got) != want || got != snap.scan(r) {
			t.Errorf("Match(%q) = %s, want %s (scan: %s)", path, routeName(got), want, routeName(snap.scan(r)))
		}
	}
}

// FuzzRouteIndex compares the index with the scan on a random route table
// (from seed) and a path of the fuzzer's choosing.
func FuzzRouteIndex(f *testing.F) {
	f.Add(uint64(1), "/api/v1/x")
	f.Add(uint64(2), "//")
	f.Add(uint64(3), "")
	f.Add(uint64(4), "a/b")
	f.Add(uint64(5), "/ab/"+strings.Repeat("/", 300))
	f.Fuzz(func(t *testing.T, seed uint64, path string) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		routes := randomRoutes(rng, 1+rng.IntN(30))
		// Routes cut from the path itself, so the fuzzer's paths hit.
		for i := 0; i < len(path) && len(routes) < 60; i++ {
			if path[i] == '/' || rng.IntN(16) == 0 {
				routes = append(routes, &Route{Name: fmt.Sprint("cut", i), Match: Match{PathPrefix: path[:i+rng.IntN(2)]}})
			}
		}
		rng.Shuffle(len(routes), func(i, j int) { routes[i], routes[j] = routes[j], routes[i] })
		snap := &Snapshot{Routes: routes, routes: newRouteIndex(routes)}
		r := randomRequest(rng)
		r.URL.Path = path
		if got, want := snap.Match(r), snap.scan(r); got != want {
			t.Fatalf("%s %q host %q: index gives %s, scan gives %s", r.Method, path, r.Host, routeName(got), routeName(want))
		}
	})
}

// BenchmarkRouteMatch matches on the first and on the last of 1,000 prefix
// routes; the ratio of the two is what the index is for.
func BenchmarkRouteMatch(b *testing.B) {
	var routes []*Route
	for i := range 1000 {
		routes = append(routes, &Route{Name: fmt.Sprint("svc-", i), Match: Match{PathPrefix: fmt.Sprintf("/svc/%d", i)}})
	}
	for _, tt := range []struct {
		name string
		snap *Snapshot
	}{
		{"index", &Snapshot{Routes: routes, routes: newRouteIndex(routes)}},
		{"scan", &Snapshot{Routes: routes}},
	} {
		for _, at := range []int{0, 999} {
			b.Run(fmt.Sprintf("%s/route=%d", tt.name, at), func(b *testing.B) {
				r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/svc/%d/items/42", at), nil)
				for b.Loop() {
					if tt.snap.Match(r) == nil {
						b.Fatal("no match")
					}
				}
			})
		}
	}
}
