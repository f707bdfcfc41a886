package policies

import (
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/llm"
)

// A route's endpoints are checked, each mistake named by its place.
func TestEndpointsValidation(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"off llm", withRoute(`{name: r, upstream: builtin:echo, endpoints: [{method: POST, path: /v1/x, tokens: 1}]}`),
			"gateway.yaml: routes[0].endpoints: applies to llm routes only"},
		{"no method", withRoute(`{name: r, upstream: builtin:echo, llm: openai, endpoints: [{path: /v1/x, tokens: 1}]}`),
			`gateway.yaml: routes[0].endpoints[0].method: must be a method such as POST, got ""`},
		{"bad path", withRoute(`{name: r, upstream: builtin:echo, llm: openai, endpoints: [{method: POST, path: "v1/{x", tokens: 1}]}`),
			`gateway.yaml: routes[0].endpoints[0].path: must be a path such as /v1/things/{id}`},
		{"rest not last", withRoute(`{name: r, upstream: builtin:echo, llm: openai, endpoints: [{method: POST, path: "/v1/{rest...}/x"}]}`),
			`gateway.yaml: routes[0].endpoints[0].path: must be a path`},
		{"twice", withRoute(`{name: r, upstream: builtin:echo, llm: openai, endpoints: [{method: POST, path: /v1/x}, {method: post, path: /v1/x}]}`),
			"gateway.yaml: routes[0].endpoints[1].path: POST /v1/x is declared twice (also routes[0].endpoints[0])"},
		{"negative tokens", withRoute(`{name: r, upstream: builtin:echo, llm: openai, endpoints: [{method: POST, path: /v1/x, tokens: -1}]}`),
			"gateway.yaml: routes[0].endpoints[0].tokens: must be between 0 and 1099511627776, got -1"},
		{"dollars past the bound", withRoute(`{name: r, upstream: builtin:echo, llm: openai, endpoints: [{method: POST, path: /v1/x, usd: 1e300}]}`),
			"gateway.yaml: routes[0].endpoints[0].usd: must be between 0 and 1e+06, got 1e+300"},
		{"unknown key", withRoute(`{name: r, upstream: builtin:echo, llm: openai, endpoints: [{method: POST, path: /v1/x, cost: 3}]}`),
			"routes[0].endpoints[0].cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(tc.yaml), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
}

// An llm route compiles to its provider's API with the operator's
// endpoints first, each at its fixed cost (dollars as micro-dollars,
// rounded up).
func TestEndpointsCompile(t *testing.T) {
	snap, err := Parse("gateway.yaml", []byte(`
routes:
  - name: a
    upstream: builtin:echo
    llm: openai
    match: {path_prefix: /a}
    endpoints: [{method: post, path: /v1/responses/compact, tokens: 5000, usd: 0.0000015}]
  - {name: b, upstream: builtin:echo, llm: anthropic, match: {path_prefix: /b}}
  - {name: c, upstream: builtin:echo}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Routes
	ep := r[0].API.Lookup("POST", "/v1/responses/compact")
	if r[0].API.Name != "openai" || ep == nil || ep.Bound != llm.BoundFixed || ep.Tokens != 5000 || ep.MicroUSD != 2 || ep.Refused != "" {
		t.Fatalf("route a: %+v, want openai with POST /v1/responses/compact at 5000 tokens and 2 µ$", ep)
	}
	if r[1].API != llm.Anthropic || r[2].API != nil {
		t.Fatalf("routes b, c: %v %v, want anthropic and none", r[1].API, r[2].API)
	}
}
