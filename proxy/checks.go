package proxy

import (
	"net/http"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// anonymousKey is the bucket shared by every request that lacks a policy's
// key when the policy says on_missing_key: shared. The NUL byte keeps it apart
// from any key a request can produce.
const anonymousKey = "\x00anon"

// buildChecks turns the route's policies into limiter checks for one request.
// A policy whose key is missing is skipped, shares the anonymous bucket, or
// rejects the request. A rejection does not stop the others: their checks
// are still built, so that a request answered 401 is counted by every policy
// that can judge it; rejectedBy is the first rejecting policy. An unset or
// unknown OnMissingKey behaves as MissingShared, the config's default: it
// never lets a keyless request escape the policy.
//
// cost says what the request takes from a policy; nil means one each. costs
// holds each check's policy cost, for settling an LLM call later.
func buildChecks(r *http.Request, route *policies.Route, s *policies.Subject, cost func(policies.Cost) int64) (checks []limiter.Check, costs []policies.Cost, rejectedBy *policies.Policy) {
	return checksOf(r, route.Policies, s, cost)
}

// checksOf is buildChecks for a list of policies.
func checksOf(r *http.Request, pols []*policies.Policy, s *policies.Subject, cost func(policies.Cost) int64) (checks []limiter.Check, costs []policies.Cost, rejectedBy *policies.Policy) {
	if len(pols) == 0 {
		return nil, nil, nil
	}
	checks = make([]limiter.Check, 0, len(pols))
	for _, p := range pols {
		var key string
		ok := false
		if p.Key != nil {
			key, ok = p.Key(r, s)
		}
		if !ok {
			switch p.OnMissingKey {
			case policies.MissingReject:
				if rejectedBy == nil {
					rejectedBy = p
				}
				continue
			case policies.MissingSkip:
				continue
			default:
				key = anonymousKey
			}
		}
		units := int64(1)
		if cost != nil {
			units = cost(p.Cost)
		}
		checks = append(checks, limiter.Check{
			Rule:  p.Rule,
			Limit: p.LimitFor(s),
			Key:   key,
			Cost:  units,
		})
		costs = append(costs, p.Cost)
	}
	return checks, costs, rejectedBy
}
