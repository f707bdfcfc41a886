package policies

import (
	"math"
	"strings"

	"github.com/ratelimit-gateway/gateway/llm"
)

// Bounds of an operator's endpoint cost: past them a cost is a typo, and
// the dollars must fit micro-dollars in an int64.
const (
	maxEndpointTokens = 1 << 40
	maxEndpointUSD    = 1e6
)

// validateDeployments checks a route's deployments: on a provider API whose
// paths name deployments, each a name and a model.
func validateDeployments(p *problems, place string, rt *RouteConfig) {
	if len(rt.Deployments) == 0 {
		return
	}
	if pr := rt.LLM.Provider(); pr == nil || !pr.API().Deployments() {
		p.add(place+".deployments", "applies to llm routes whose API names a {deployment} in its paths")
		return
	}
	for _, name := range sortedKeys(rt.Deployments) {
		switch model := rt.Deployments[name]; {
		case name == "" || strings.ContainsAny(name, "/?#"):
			p.addf(place+".deployments", "%q is not a deployment name (one path segment)", name)
		case model == "":
			p.addf(place+".deployments."+name, "must name the model the deployment serves")
		}
	}
}

// validateEndpoints checks a route's endpoints: an llm route's, each a
// method, a path pattern and a cost that fits.
func validateEndpoints(p *problems, place string, rt *RouteConfig) {
	if len(rt.Endpoints) > 0 && rt.LLM == "" {
		p.add(place+".endpoints", "applies to llm routes only (set llm: openai or llm: anthropic)")
		return
	}
	seen := map[string]int{}
	for i, ec := range rt.Endpoints {
		ep := indexPlace(place+".endpoints", i)
		if m := strings.ToUpper(ec.Method); ec.Method != "*" && !isToken(ec.Method) {
			p.addf(ep+".method", "must be a method such as POST, got %q", ec.Method)
		} else if first, dup := seen[m+" "+ec.Path]; dup {
			p.addf(ep+".path", "%s %s is declared twice (also %s)", m, ec.Path, indexPlace(place+".endpoints", first))
		} else {
			seen[m+" "+ec.Path] = i
		}
		if !llm.ValidPattern(ec.Path) {
			p.addf(ep+".path", "must be a path such as /v1/things/{id}, segments in braces for any one segment and a last {rest...} for the rest, got %q", ec.Path)
		}
		if ec.Tokens < 0 || ec.Tokens > maxEndpointTokens {
			p.addf(ep+".tokens", "must be between 0 and %d, got %d", int64(maxEndpointTokens), ec.Tokens)
		}
		if ec.USD < 0 || ec.USD > maxEndpointUSD || math.IsNaN(ec.USD) {
			p.addf(ep+".usd", "must be between 0 and %g, got %g", maxEndpointUSD, ec.USD)
		}
	}
}
