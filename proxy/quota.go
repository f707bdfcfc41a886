package proxy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// quotaReport is what GET tenants.quota_path answers: the asking key's
// tenant; whether a call of the asked size would pass now, and if not when;
// and for each policy that keys on it, its limit, what remains, and when
// the call's share of it would pass.
type quotaReport struct {
	Tenant string `json:"tenant"`
	Plan   string `json:"plan"`
	// Call is the call the answer is for: ?tokens=N (its prompt plus its
	// output cap, what the gateway reserves), or 1 token when not given,
	// which Assumed then says.
	Call quotaCall `json:"call"`
	// Allowed says whether such a call would pass now; RetryAfterMs is
	// when it would (0 when now), the longest wait among the policies.
	Allowed      bool  `json:"allowed"`
	RetryAfterMs int64 `json:"retry_after_ms"`
	// Final says that no wait a client can use lets such a call pass (it
	// is larger than a quota, or waits past a minute or for a spent day
	// or month budget): the call would get a 429 with x-should-retry:
	// false.
	Final    bool          `json:"final"`
	Policies []quotaPolicy `json:"policies"`
}

// quotaCall is the size of call a quota report answers for.
type quotaCall struct {
	Tokens   int64 `json:"tokens"`
	USDMicro int64 `json:"usd_micros"`
	// Assumed, when set, says which sizes were not given and what was
	// assumed for them.
	Assumed string `json:"assumed,omitempty"`
}

// maxQuotaAsk bounds ?tokens and ?usd_micros: far past any quota, and safe
// in every sum the limiter makes of it.
const maxQuotaAsk = 1 << 50

type quotaPolicy struct {
	Policy       string `json:"policy"`
	Cost         string `json:"cost"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Per          string `json:"per"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	// Asked is what the call takes from this policy: 1 request, its
	// tokens, its micro-dollars.
	Asked int64 `json:"asked"`
	// RetryAfterMs is when Asked would pass; 0 when it would now.
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// serveQuota answers a tenant's question "what do I have left?" without
// taking anything: every policy whose key is the tenant or its API key (with
// the asking client's address where a key also has ip), read with Peek. r
// is in its route's error format, and the route's policies that need no
// key let it through (see planner.quota).
func (h *Handler) serveQuota(w http.ResponseWriter, r *http.Request, snap *policies.Snapshot) {
	call, msg := quotaCallOf(r)
	if msg != "" {
		h.writeError(w, r, http.StatusBadRequest, errorBody{Message: msg})
		return
	}
	s, _ := identify(r, snap, anySDKRoute, h.tokens) // any header a client SDK sends its key in
	if s.TokenRefused != nil {
		h.writeTokenRefused(w, r, snap, nil, s.TokenRefused)
		return
	}
	if s.Tenant == nil {
		w.Header().Set("WWW-Authenticate", "Bearer")
		h.writeError(w, r, http.StatusUnauthorized, errorBody{Message: "the quota report needs a known API key (Authorization: Bearer, or " + keyHeaders(snap, nil)[0] + ")"})
		return
	}
	names := make([]string, 0, len(snap.Policies))
	for name := range snap.Policies {
		names = append(names, name)
	}
	sort.Strings(names)
	var checks []limiter.Check
	var pols []*policies.Policy
	for _, name := range names {
		pol := snap.Policies[name]
		if (!pol.Reads.Tenant && !pol.Reads.APIKey) || pol.Reads.Model || pol.Key == nil {
			continue // not the tenant's own (or per model: no model is asked for here)
		}
		key, ok := pol.Key(r, &s)
		if !ok {
			continue
		}
		checks = append(checks, limiter.Check{Rule: pol.Rule, Limit: pol.LimitFor(&s), Key: key, Cost: call.cost(pol.Cost)})
		pols = append(pols, pol)
	}
	rep := quotaReport{Tenant: s.Tenant.Name, Plan: s.Tenant.Plan, Call: call, Allowed: true, Policies: []quotaPolicy{}}
	for i, d := range h.limiter.Peek(r.Context(), checks) {
		rem, _ := stateRemaining(d)
		q := quotaPolicy{
			Policy: d.Policy, Cost: string(pols[i].Cost), Algorithm: string(pols[i].Rule.Algorithm),
			Limit: d.Limit.Quota(), Per: d.Limit.Per(), Remaining: rem, Asked: checks[i].Units(),
			ResetAfterMs: ceilDiv(int64(d.ResetAfter), 1e6),
		}
		if !d.Allowed && !pols[i].Rule.Shadow {
			// As the call's own 429 would say it (retry_after_ms).
			q.RetryAfterMs = retryAfterMillis(d.RetryAfter)
			q.ResetAfterMs = max(q.ResetAfterMs, q.RetryAfterMs)
			rep.Allowed = false
			rep.RetryAfterMs = max(rep.RetryAfterMs, q.RetryAfterMs)
			rep.Final = rep.Final || finalRefusal(d, true)
		}
		rep.Policies = append(rep.Policies, q)
	}
	buf, err := json.Marshal(rep)
	if err != nil {
		h.writeError(w, r, http.StatusInternalServerError, errorBody{Message: "the quota report failed; see the gateway log"}, slog.Any("err", err))
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Length", strconv.Itoa(len(buf)+1))
	w.Write(append(buf, '\n'))
}

// quotaCallOf reads the size of call a quota report is asked about.
func quotaCallOf(r *http.Request) (quotaCall, string) {
	q := r.URL.Query()
	c := quotaCall{Tokens: 1, USDMicro: 1}
	var assumed []string
	for _, f := range []struct {
		name string
		v    *int64
	}{{"tokens", &c.Tokens}, {"usd_micros", &c.USDMicro}} {
		s := q.Get(f.name)
		if s == "" {
			assumed = append(assumed, f.name+"=1")
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > maxQuotaAsk {
			return c, fmt.Sprintf("%s must be a whole number from 1 to %d (the call's prompt plus its output cap), got %q", f.name, int64(maxQuotaAsk), s)
		}
		*f.v = n
	}
	if len(assumed) > 0 {
		c.Assumed = strings.Join(assumed, ", ") + ": a call of one unit; pass ?tokens=N (the call's prompt plus its output cap) to ask about a real call"
	}
	return c, ""
}

// cost is what the call takes from a policy of cost.
func (c quotaCall) cost(cost policies.Cost) int64 {
	switch cost {
	case policies.CostTokens, policies.CostInputTokens, policies.CostOutputTokens:
		return c.Tokens
	case policies.CostUSD:
		return c.USDMicro
	}
	return 1
}
