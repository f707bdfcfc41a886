package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/metrics/topk"
	"github.com/ratelimit-gateway/gateway/policies"
)

// Top reports each policy's most refused keys (a *topk.Set). Its methods
// are safe for concurrent use.
type Top interface {
	// Top returns policy's most refused keys, most refused first.
	Top(policy string) []topk.Entry
	// Window is the span the counts cover at most.
	Window() time.Duration
}

// topView is /admin/top's answer.
type topView struct {
	// Scope says whose refusals these are: this instance's alone.
	Scope string `json:"scope"`
	// Window is the span the counts cover at most ("5m").
	Window   string          `json:"window"`
	Policies []topPolicyView `json:"policies"`
}

type topPolicyView struct {
	Policy string       `json:"policy"`
	Key    string       `json:"key"` // the policy's key spec
	Keys   []topKeyView `json:"keys"`
}

// topKeyView is one refused key as an operator can act on it: a tenant's
// name, a client network, a model name as they are; an API key or a header
// or query value as the first 12 hex digits of its SHA-256.
type topKeyView struct {
	Who   string `json:"who"`
	Count uint64 `json:"count"`
	// Error is how much Count may over-estimate (a key that displaced
	// another in the summary inherited its count).
	Error uint64 `json:"error"`
}

const topScope = "this instance (each gateway counts its own refusals; Prometheus has the fleet's by policy)"

// serveTop answers GET /admin/top[?policy=NAME].
func (h *handler) serveTop(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Top == nil {
		writeError(w, http.StatusNotImplemented, "this gateway keeps no top refused keys")
		return
	}
	snap := h.cfg.Snapshots.Load()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no configuration is loaded yet")
		return
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "the query does not parse: "+err.Error())
		return
	}
	for name, vs := range vals {
		if name != "policy" || len(vs) > 1 {
			writeError(w, http.StatusBadRequest, "this request takes one parameter, policy, at most once")
			return
		}
	}
	names := sortedPolicies(snap)
	if p := vals.Get("policy"); p != "" {
		if snap.Policies[p] == nil {
			writeError(w, http.StatusBadRequest, "unknown policy "+strconv.Quote(p)+" (known: "+strings.Join(names, ", ")+")")
			return
		}
		names = []string{p}
	}
	writeJSON(w, http.StatusOK, h.topView(snap, names))
}

func (h *handler) topView(snap *policies.Snapshot, names []string) topView {
	v := topView{Scope: topScope, Window: limiter.ShortDuration(h.cfg.Top.Window()), Policies: []topPolicyView{}}
	for _, name := range names {
		p := snap.Policies[name]
		pv := topPolicyView{Policy: name, Key: p.KeySpec, Keys: []topKeyView{}}
		for _, e := range h.cfg.Top.Top(name) {
			pv.Keys = append(pv.Keys, topKeyView{Who: displayKey(p.KeySpec, e.Key), Count: e.Count, Error: e.Error})
		}
		v.Policies = append(v.Policies, pv)
	}
	return v
}

func sortedPolicies(snap *policies.Snapshot) []string {
	names := make([]string, 0, len(snap.Policies))
	for n := range snap.Policies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// anonKey is the key of on_missing_key: shared's one bucket.
const anonKey = "\x00anon"

// displayKey renders a policy's key, part by part as its spec names them,
// without a secret: ip, tenant and model parts as they are; api_key,
// header and query parts as a short digest (a header can carry a
// credential, and an API key's bucket key is already its SHA-256).
func displayKey(spec, key string) string {
	if key == anonKey {
		return "(no key: the shared anonymous bucket)"
	}
	kinds := strings.Split(spec, "+")
	vals := strings.Split(key, "\x1f")
	if len(kinds) != len(vals) {
		return "key " + shortDigest(key)
	}
	out := make([]string, len(vals))
	for i, raw := range kinds {
		kind := strings.TrimSpace(raw)
		v := vals[i]
		switch strings.ToLower(strings.SplitN(kind, ":", 2)[0]) {
		case "ip", "tenant", "model":
			if !utf8.ValidString(v) || strings.HasPrefix(v, "\x1e") || len(v) > 128 {
				v = shortDigest(v)
			}
			out[i] = strings.ToLower(strings.SplitN(kind, ":", 2)[0]) + " " + v
		case "api_key":
			out[i] = "api_key sha256:" + v[:min(len(v), 12)]
		default: // header:NAME, query:NAME
			out[i] = kind + " " + shortDigest(v)
		}
	}
	return strings.Join(out, " + ")
}

// shortDigest is "sha256:" and the first 12 hex digits of v's SHA-256; a
// part the gateway already replaced by its digest (a long value) shows
// that digest's first digits, the same.
func shortDigest(v string) string {
	if d, ok := strings.CutPrefix(v, "\x1e"); ok && len(d) >= 12 {
		return "sha256:" + d[:12]
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])[:12]
}
