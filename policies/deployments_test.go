package policies

import (
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/llm"
)

// routes[].deployments compiles on llm: azure (names with dots included)
// and is refused, by its place, where no API names deployments or where a
// deployment names no model.
func TestDeployments(t *testing.T) {
	snap, err := Parse("gateway.yaml", []byte(`
routes:
  - {name: a, upstream: builtin:echo, llm: azure, deployments: {gpt-4.1: gpt-4.1, chat: gpt-4o-mini}}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := snap.Routes[0]
	if rt.Provider != llm.AzureProvider || rt.ErrorShape != llm.AzureProvider || rt.Deployments["gpt-4.1"] != "gpt-4.1" || rt.Deployments["chat"] != "gpt-4o-mini" {
		t.Fatalf("got provider %v, errors %v, deployments %v; want azure, azure, both deployments", rt.Provider, rt.ErrorShape, rt.Deployments)
	}
	for _, tc := range []struct{ yaml, want string }{
		{`{name: a, upstream: builtin:echo, llm: openai, deployments: {chat: gpt-4o-mini}}`,
			`gateway.yaml: routes[0].deployments: applies to llm routes whose API names deployments in its paths (set llm: azure)`},
		{`{name: a, upstream: builtin:echo, deployments: {chat: gpt-4o-mini}}`,
			`gateway.yaml: routes[0].deployments: applies to llm routes whose API names deployments in its paths (set llm: azure)`},
		{`{name: a, upstream: builtin:echo, llm: azure, deployments: {chat: ""}}`,
			`gateway.yaml: routes[0].deployments.chat: must name the model the deployment serves`},
	} {
		_, err := Parse("gateway.yaml", []byte("routes:\n  - "+tc.yaml+"\n"), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %s", tc.yaml, err, tc.want)
		}
	}
}
