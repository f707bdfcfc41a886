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

// buildChecks turns the route's policies into limiter checks for p's request.
// A policy whose key is missing is skipped, shares the anonymous bucket, or
// rejects the request. A rejection does not stop the others: their checks
// are still built, so that a request answered 401 is counted by every policy
// that can judge it; rejectedBy is the first rejecting policy. An unset or
// unknown OnMissingKey behaves as MissingShared, the config's default: it
// never lets a keyless request escape the policy.
//
// cost says what the request takes from a policy; nil means one each. costs
// holds each check's policy cost, for settling an LLM call later.
//
// The checks and costs are built in p's own arrays when they are large
// enough (most routes have one or two policies): p is on the heap anyway.
func (p *plan) buildChecks(cost func(policies.Cost) int64) {
	p.checks, p.costs, p.rejectedBy = checksInto(p.checkBuf[:0], p.costBuf[:0], p.r, p.route.Policies, &p.subject, cost)
}

// planChecks is how many checks a plan holds without allocating.
const planChecks = 2

// spillChecks is how many checks a checkSpill holds.
const spillChecks = 8

// checkSpill backs the checks and costs of a route with more policies than
// a plan holds (up to spillChecks): one allocation for both, however many
// policies, rather than one each. checkPair is the same for a list of
// policies built outside a plan (checksOf), most often one or two.
type (
	checkSpill struct {
		checks [spillChecks]limiter.Check
		costs  [spillChecks]policies.Cost
	}
	checkPair struct {
		checks [planChecks]limiter.Check
		costs  [planChecks]policies.Cost
	}
)

// newChecks returns empty checks and costs with room for n each.
func newChecks(n int) ([]limiter.Check, []policies.Cost) {
	switch {
	case n <= planChecks:
		s := new(checkPair)
		return s.checks[:0], s.costs[:0]
	case n <= spillChecks:
		s := new(checkSpill)
		return s.checks[:0], s.costs[:0]
	}
	return make([]limiter.Check, 0, n), make([]policies.Cost, 0, n)
}

// checksInto is buildChecks for a list of policies, building into checks
// and costs (length 0) when their capacity holds every policy's.
func checksInto(checks []limiter.Check, costs []policies.Cost, r *http.Request, pols []*policies.Policy, s *policies.Subject, cost func(policies.Cost) int64) ([]limiter.Check, []policies.Cost, *policies.Policy) {
	if len(pols) == 0 {
		return nil, nil, nil
	}
	if cap(checks) < len(pols) || cap(costs) < len(pols) {
		checks, costs = newChecks(len(pols))
	}
	var rejectedBy *policies.Policy
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
