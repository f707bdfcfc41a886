package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// maxKeyBytes bounds the key parameter. Keys the gateway makes are far
// shorter (a part over policies.MaxKeyPartBytes is a digest).
const maxKeyBytes = 4096

// keyState is GET /admin/keys's answer: the key's state as the next
// request of cost 1 would find it.
type keyState struct {
	Policy    string `json:"policy"`
	Key       string `json:"key"`
	Plan      string `json:"plan,omitempty"`
	Algorithm string `json:"algorithm"`
	Backend   string `json:"backend"` // local or redis
	Limit     int64  `json:"limit"`
	// Per is the period of a rate limit; absent for in-flight limits.
	Per          string `json:"per,omitempty"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

// keyReset is DELETE /admin/keys's answer.
type keyReset struct {
	Reset     bool   `json:"reset"`
	Policy    string `json:"policy"`
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Backend   string `json:"backend"`
}

// keyQuery is a parsed /admin/keys request.
type keyQuery struct {
	policy *policies.Policy
	key    string
	plan   string
	limit  limiter.Limit // the plan's, or the policy's
}

// serveKeys answers GET (the key's state) and DELETE (reset) of
// /admin/keys?policy=NAME&key=KEY[&plan=PLAN].
func (h *handler) serveKeys(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Keys == nil {
		writeError(w, http.StatusNotImplemented, "this gateway cannot read or reset keys from the admin API")
		return
	}
	snap := h.cfg.Snapshots.Load()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no configuration is loaded yet")
		return
	}
	params := []string{"policy", "key", "plan"}
	if r.Method == http.MethodDelete {
		params = params[:2] // a reset clears the key under every limit: no plan to pick
	}
	q, msg := parseKeyQuery(snap, r.URL.RawQuery, params)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if r.Method == http.MethodDelete {
		h.resetKey(w, r, q)
		return
	}
	c := limiter.Check{Rule: q.policy.Rule, Limit: q.limit, Key: q.key, Cost: 1}
	d, err := h.cfg.Keys.Peek(r.Context(), c)
	if err != nil {
		writeKeysError(w, "reading the key's state failed", err)
		return
	}
	st := keyState{
		Policy: q.policy.Name(), Key: q.key, Plan: q.plan,
		Algorithm: algorithmOf(q.policy), Backend: backendOf(q.policy),
		Limit: d.Limit.Quota(), Allowed: d.Allowed,
		ResetAfterMs: ceilMillis(d.ResetAfter), RetryAfterMs: ceilMillis(d.RetryAfter),
	}
	if !q.policy.Rule.Algorithm.InFlight() {
		st.Per = d.Limit.Per()
	}
	if d.Allowed {
		st.Remaining = max(d.Remaining, 0)
	} else {
		st.ResetAfterMs = max(st.ResetAfterMs, st.RetryAfterMs)
	}
	writeJSON(w, http.StatusOK, st)
}

// resetKey resets q's key under every limit of its policy: local buckets
// are kept per limit, so a key reset under its default limit alone would
// keep the bucket it has under a plan.
func (h *handler) resetKey(w http.ResponseWriter, r *http.Request, q keyQuery) {
	limits := []limiter.Limit{q.policy.Limit}
	for _, l := range q.policy.Plans {
		if !slices.Contains(limits, l) {
			limits = append(limits, l)
		}
	}
	for _, l := range limits {
		if err := h.cfg.Keys.Reset(r.Context(), limiter.Check{Rule: q.policy.Rule, Limit: l, Key: q.key, Cost: 1}); err != nil {
			h.log.Warn("admin: resetting a key failed", "policy", q.policy.Name(), "key", q.key, "remote", r.RemoteAddr, "error", err)
			writeKeysError(w, "resetting the key failed", err)
			return
		}
	}
	h.log.Info("admin: key reset", "policy", q.policy.Name(), "key", q.key, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, keyReset{
		Reset: true, Policy: q.policy.Name(), Key: q.key,
		Algorithm: algorithmOf(q.policy), Backend: backendOf(q.policy),
	})
}

// writeKeysError answers a failure of Keys: 501 when the backend cannot do
// it, 503 when Redis did not answer (try again), 500 otherwise.
func writeKeysError(w http.ResponseWriter, what string, err error) {
	status := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, limiter.ErrNoReset):
		status = http.StatusNotImplemented
	case errors.Is(err, limiter.ErrNoSharedBackend):
		status = http.StatusInternalServerError
	}
	writeError(w, status, what+": "+err.Error())
}

// parseKeyQuery reads policy, key and plan (each at most once; no other
// parameter) and checks them against snap. msg, when not "", is the 400's
// message.
func parseKeyQuery(snap *policies.Snapshot, raw string, allowed []string) (q keyQuery, msg string) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, "the query does not parse: " + err.Error()
	}
	for name, vs := range vals {
		if !slices.Contains(allowed, name) {
			return q, fmt.Sprintf("unknown parameter %q (this request takes %s)", name, strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return q, fmt.Sprintf("parameter %q is given %d times; give it once", name, len(vs))
		}
	}
	name := vals.Get("policy")
	if name == "" {
		return q, "the policy parameter is required: /admin/keys?policy=NAME&key=KEY"
	}
	p := snap.Policies[name]
	if p == nil {
		known := make([]string, 0, len(snap.Policies))
		for n := range snap.Policies {
			known = append(known, n)
		}
		slices.Sort(known)
		return q, fmt.Sprintf("unknown policy %q (known: %s)", name, strings.Join(known, ", "))
	}
	q.policy, q.limit = p, p.Limit
	q.key = vals.Get("key")
	if q.key == "" {
		return q, fmt.Sprintf("the key parameter is required: the key as policy %q computes it from a request (key: %s)", name, p.KeySpec)
	}
	if len(q.key) > maxKeyBytes {
		return q, fmt.Sprintf("the key is %d bytes; the gateway makes no key longer than %d", len(q.key), maxKeyBytes)
	}
	if msg := checkKey(snap, p, q.key); msg != "" {
		return q, msg
	}
	if q.plan = vals.Get("plan"); q.plan != "" {
		l, ok := p.Plans[q.plan]
		if !ok {
			if len(p.Plans) == 0 {
				return q, fmt.Sprintf("policy %q has no plans; leave plan out", name)
			}
			plans := make([]string, 0, len(p.Plans))
			for pl := range p.Plans {
				plans = append(plans, pl)
			}
			slices.Sort(plans)
			return q, fmt.Sprintf("policy %q has no plan %q (its plans: %s)", name, q.plan, strings.Join(plans, ", "))
		}
		q.limit = l
	}
	return q, ""
}

// checkKey refuses a key that policy p could never have made, where its
// key spec says enough to tell: an ip key that is not a network as the
// gateway groups clients, an api_key key that is not a SHA-256, a tenant no
// API key belongs to. It returns the 400's message, or "". Keys starting
// with NUL are the gateway's own (the anonymous bucket of on_missing_key:
// shared is "\x00anon", key=%00anon) and pass.
func checkKey(snap *policies.Snapshot, p *policies.Policy, key string) string {
	if key[0] == 0 {
		return ""
	}
	rd := p.Reads
	single := len(rd.Headers) == 0 && len(rd.Queries) == 0 && !rd.Model
	switch {
	case single && rd.IP && !rd.APIKey && !rd.Tenant:
		pfx, err := netip.ParsePrefix(key)
		if err == nil && pfx == pfx.Masked() {
			return ""
		}
		msg := fmt.Sprintf("policy %q keys on ip: the key is the client's network as the gateway groups clients "+
			"(server.ipv4_prefix, server.ipv6_prefix), like 203.0.113.7/32 or 2001:db8:1:2::/64; got %q", p.Name(), key)
		if hint := networkHint(snap.Identity, key); hint != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", hint)
		}
		return msg
	case single && rd.APIKey && !rd.IP && !rd.Tenant:
		if policies.IsAPIKeyPart(key) {
			return ""
		}
		// The key itself is not repeated: it may be an API key pasted by mistake.
		return fmt.Sprintf("policy %q keys on api_key: the key is the SHA-256 of the API key in lower-case hex, "+
			"64 digits (printf %%s \"$API_KEY\" | sha256sum), never the API key itself", p.Name())
	case single && rd.Tenant && !rd.IP && !rd.APIKey:
		if snap.Tenants.HasTenant(key) {
			return ""
		}
		return fmt.Sprintf("policy %q keys on tenant: no API key in tenants.keys belongs to tenant %q", p.Name(), key)
	}
	return ""
}

// networkHint suggests the network of an address or a prefix given with
// its host bits, grouped as id groups clients, or "".
func networkHint(id policies.Identity, key string) string {
	addr, err := netip.ParseAddr(key)
	if pfx, perr := netip.ParsePrefix(key); perr == nil {
		addr, err = pfx.Addr(), nil
	}
	if err != nil {
		return ""
	}
	if pfx := id.ClientNet(addr.Unmap()); pfx.IsValid() {
		return pfx.String()
	}
	return ""
}

func algorithmOf(p *policies.Policy) string {
	if p.Rule.Algorithm == "" {
		return string(limiter.TokenBucket)
	}
	return string(p.Rule.Algorithm)
}

func backendOf(p *policies.Policy) string {
	if p.Rule.Algorithm.Shared() {
		return "redis"
	}
	return "local"
}

// ceilMillis is d in whole milliseconds, rounded up; 0 for none.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
