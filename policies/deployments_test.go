package policies

import (
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/llm"
)

// deployedAPI is a provider API whose paths name a deployment, registered
// for these tests alone: routes[].deployments is the config's, for any API
// that names deployments, and is tested here without any one provider's.
type deployedAPI struct{ llm.Provider }

var deployed = &llm.API{Name: "deployed-test", Endpoints: []llm.Endpoint{
	{Method: "POST", Path: "/d/{deployment}/chat/completions", Kind: llm.ChatCompletions, Bound: llm.BoundTokens},
}}

func (deployedAPI) Name() string  { return deployed.Name }
func (deployedAPI) API() *llm.API { return deployed }

var deployedProvider llm.Provider = deployedAPI{llm.OpenAIProvider}

func init() { llm.Register(deployedProvider) }

// routes[].deployments compiles on an API whose paths name deployments
// (names with dots included) and is refused, by its place, where no API
// names deployments or where a deployment names no model.
func TestDeployments(t *testing.T) {
	snap, err := Parse("gateway.yaml", []byte(`
routes:
  - {name: a, upstream: builtin:echo, llm: deployed-test, deployments: {gpt-4.1: gpt-4.1, chat: gpt-4o-mini}}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := snap.Routes[0]
	if rt.Provider != deployedProvider || rt.ErrorShape != deployedProvider || rt.Deployments["gpt-4.1"] != "gpt-4.1" || rt.Deployments["chat"] != "gpt-4o-mini" {
		t.Fatalf("got provider %v, errors %v, deployments %v; want deployed-test, deployed-test, both deployments", rt.Provider, rt.ErrorShape, rt.Deployments)
	}
	for _, tc := range []struct{ yaml, want string }{
		{`{name: a, upstream: builtin:echo, llm: openai, deployments: {chat: gpt-4o-mini}}`,
			`gateway.yaml: routes[0].deployments: applies to llm routes whose API names a {deployment} in its paths`},
		{`{name: a, upstream: builtin:echo, deployments: {chat: gpt-4o-mini}}`,
			`gateway.yaml: routes[0].deployments: applies to llm routes whose API names a {deployment} in its paths`},
		{`{name: a, upstream: builtin:echo, llm: deployed-test, deployments: {chat: ""}}`,
			`gateway.yaml: routes[0].deployments.chat: must name the model the deployment serves`},
		{`{name: a, upstream: builtin:echo, llm: deployed-test, deployments: {"a/b": gpt-4o}}`,
			`gateway.yaml: routes[0].deployments: "a/b" is not a deployment name (one path segment)`},
	} {
		_, err := Parse("gateway.yaml", []byte("routes:\n  - "+tc.yaml+"\n"), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %s", tc.yaml, err, tc.want)
		}
	}
}
