package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sort"
	"strconv"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// peeker is the limiter a quota report needs. *limiter.Engine is one.
type peeker interface {
	Peek(ctx context.Context, checks []limiter.Check) []limiter.Decision
}

// quotaReport is what GET tenants.quota_path answers: the asking key's
// tenant, and for each policy that keys on it, its limit and what remains.
type quotaReport struct {
	Tenant   string        `json:"tenant"`
	Plan     string        `json:"plan"`
	Policies []quotaPolicy `json:"policies"`
}

type quotaPolicy struct {
	Policy       string `json:"policy"`
	Cost         string `json:"cost"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Per          string `json:"per"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	// RetryAfterMs is when one more unit would pass; 0 when it would now.
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// serveQuota answers a tenant's question "what do I have left?" without
// taking anything: every policy whose key is the tenant or its API key (with
// the asking client's address where a key also has ip), read with Peek.
func (h *Handler) serveQuota(w http.ResponseWriter, r *http.Request, snap *policies.Snapshot) {
	r = withOpenAIErrors(r)
	s, _ := identify(r, snap, &policies.Route{LLM: true}) // any header a client SDK sends its key in
	if s.Tenant == nil {
		w.Header().Set("WWW-Authenticate", "Bearer")
		h.writeError(w, r, http.StatusUnauthorized, errorBody{Message: "the quota report needs a known API key (Authorization: Bearer, or " + keyHeaders(snap, nil)[0] + ")"})
		return
	}
	p, ok := h.limiter.(peeker)
	if !ok {
		h.writeError(w, r, http.StatusInternalServerError, errorBody{Message: "this limiter cannot report quotas; see the gateway log"})
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
		checks = append(checks, limiter.Check{Rule: pol.Rule, Limit: pol.LimitFor(&s), Key: key, Cost: 1})
		pols = append(pols, pol)
	}
	rep := quotaReport{Tenant: s.Tenant.Name, Plan: s.Tenant.Plan, Policies: []quotaPolicy{}}
	for i, d := range p.Peek(r.Context(), checks) {
		q := quotaPolicy{
			Policy: d.Policy, Cost: string(pols[i].Cost), Algorithm: string(pols[i].Rule.Algorithm),
			Limit: d.Limit.Quota(), Per: d.Limit.Per(), Remaining: remaining(&d),
			ResetAfterMs: ceilDiv(int64(d.ResetAfter), 1e6), RetryAfterMs: ceilDiv(int64(d.RetryAfter), 1e6),
		}
		if !d.Allowed {
			q.ResetAfterMs = max(q.ResetAfterMs, q.RetryAfterMs)
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
