package admin

import (
	"net/http"

	"github.com/ratelimit-gateway/gateway/policies"
)

// /admin/config shows the configuration in force: the decoded config, its
// defaults applied, as policies.Redacted renders it, so that the rule that
// keeps secrets out is declared once, on the config types: tenant API keys,
// the Redis, Sentinel and admin credentials, upstream_api_key and the values
// a route's match.headers compares with (a header equal to a shared secret
// is a way to guard a route) are never shown, and no URL is shown with its
// user info or query. The API keys are counted per plan instead.

// configView is /admin/config's answer.
type configView struct {
	Source string `json:"source"`
	// Digest is the SHA-256 of the bytes the configuration was read from,
	// in hex ("" for one built in memory).
	Digest string `json:"digest"`
	// Config is the configuration as policies.Redacted shows it; nil for a
	// snapshot built without one.
	Config any `json:"config"`
	// APIKeys counts what tenants.keys and the keys file hold.
	APIKeys keyCounts `json:"api_keys"`
}

// keyCounts counts API keys, and per plan ("(none)" for keys without one)
// the keys and the tenants they belong to; no key is shown.
type keyCounts struct {
	Keys  int                  `json:"keys"`
	Plans map[string]planCount `json:"plans"`
}

type planCount struct {
	Tenants int `json:"tenants"`
	Keys    int `json:"keys"`
}

func (h *handler) serveConfig(w http.ResponseWriter, _ *http.Request) {
	snap := h.cfg.Snapshots.Load()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no configuration is loaded yet")
		return
	}
	v := configView{Source: snap.Source, Digest: digestHex(snap.Digest), APIKeys: countKeys(snap.Tenants)}
	if snap.Config != nil {
		v.Config = policies.Redacted(snap.Config)
	}
	writeJSON(w, http.StatusOK, v)
}

// countKeys counts the keys written in clear and as digests.
func countKeys(t policies.Tenants) keyCounts {
	v := keyCounts{Keys: len(t.Keys) + len(t.Digests), Plans: map[string]planCount{}}
	seen := map[policies.Tenant]bool{}
	count := func(tn policies.Tenant) {
		plan := tn.Plan
		if plan == "" {
			plan = "(none)"
		}
		pc := v.Plans[plan]
		pc.Keys++
		if !seen[tn] {
			seen[tn] = true
			pc.Tenants++
		}
		v.Plans[plan] = pc
	}
	for _, tn := range t.Keys {
		count(tn)
	}
	for _, tn := range t.Digests {
		count(tn)
	}
	return v
}
