package admin

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// statusView is /admin/status's answer: what the status page shows, read
// from the configuration in force and the metrics registry, so that its
// numbers are the ones /metrics has.
type statusView struct {
	Scope  string         `json:"scope"`
	Config configStatus   `json:"config"`
	Routes []routeStatus  `json:"routes"`
	Series *seriesView    `json:"series,omitempty"`
	Redis  *redisStatus   `json:"redis,omitempty"`
	LLM    []tenantStatus `json:"llm"`
}

type configStatus struct {
	Source string `json:"source"`
	Digest string `json:"digest"`
	// LoadedAt is when the configuration in force was loaded (RFC 3339),
	// from gateway_config_last_reload_timestamp_seconds.
	LoadedAt      string   `json:"loaded_at,omitempty"`
	ReloadsOK     uint64   `json:"reloads_ok"`
	ReloadsFailed uint64   `json:"reloads_failed"`
	Warnings      []string `json:"warnings"`
}

type routeStatus struct {
	Name     string      `json:"name"`
	Policies []string    `json:"policies"`
	Requests routeCounts `json:"requests"`
}

type redisStatus struct {
	Addrs []string     `json:"addrs"`
	Nodes []nodeStatus `json:"nodes"`
}

// nodeStatus is one Redis node as the metrics show it; with one breaker
// for the whole backend, one entry named "all".
type nodeStatus struct {
	Node         string `json:"node"`
	BreakerOpen  bool   `json:"breaker_open"`
	BreakerOpens uint64 `json:"breaker_opens"`
	Errors       uint64 `json:"errors"`
	Timeouts     uint64 `json:"timeouts"`
	FailFast     uint64 `json:"fail_fast"`
}

// tenantStatus is one tenant's LLM spending since the start, and what is
// left of each of its token or dollar quotas.
type tenantStatus struct {
	Tenant string        `json:"tenant"`
	Plan   string        `json:"plan,omitempty"`
	Tokens uint64        `json:"tokens"`
	USD    float64       `json:"usd"`
	Quotas []quotaStatus `json:"quotas"`
}

type quotaStatus struct {
	Policy string `json:"policy"`
	Cost   string `json:"cost"` // tokens, input_tokens, output_tokens or usd (micro-dollars)
	Per    string `json:"per"`
	Limit  int64  `json:"limit"`
	// Used is Limit − remaining, as the next request would find it.
	Used  int64  `json:"used"`
	Error string `json:"error,omitempty"`
}

// maxQuotaTenants bounds the tenants whose quotas one status answer reads:
// each is a read of the limiter (a Redis round trip for shared policies).
const maxQuotaTenants = 100

func (h *handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	snap := h.cfg.Snapshots.Load()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no configuration is loaded yet")
		return
	}
	v := statusView{Scope: "this instance", LLM: []tenantStatus{}}
	v.Config = configStatus{Source: snap.Source, Digest: digestHex(snap.Digest), Warnings: []string{}}
	for _, w := range snap.Warnings {
		v.Config.Warnings = append(v.Config.Warnings, w.Error())
	}
	fams := map[string]*dto.MetricFamily{}
	if h.cfg.Gatherer != nil {
		got, _ := h.cfg.Gatherer.Gather() // partial families still count
		for _, f := range got {
			fams[f.GetName()] = f
		}
	}
	if f := fams["gateway_config_last_reload_timestamp_seconds"]; f != nil && len(f.Metric) > 0 {
		sec := f.Metric[0].GetGauge().GetValue()
		whole, frac := math.Modf(sec)
		v.Config.LoadedAt = time.Unix(int64(whole), int64(frac*1e9)).UTC().Format(time.RFC3339)
	}
	for _, m := range fams["gateway_config_reloads_total"].GetMetric() {
		switch label(m.GetLabel(), "result") {
		case "success":
			v.Config.ReloadsOK = uint64(m.GetCounter().GetValue())
		case "failure":
			v.Config.ReloadsFailed = uint64(m.GetCounter().GetValue())
		}
	}

	counts := map[string]routeCounts{}
	if h.cfg.Gatherer != nil {
		counts, _ = requestCounts(gathered(fams))
	}
	v.Routes = []routeStatus{}
	for _, rt := range snap.Routes {
		rs := routeStatus{Name: rt.Name, Policies: []string{}, Requests: counts[rt.Name]}
		for _, p := range rt.Policies {
			rs.Policies = append(rs.Policies, p.Name())
		}
		v.Routes = append(v.Routes, rs)
	}
	if c, ok := counts["none"]; ok { // requests no route took
		v.Routes = append(v.Routes, routeStatus{Name: "none", Policies: []string{}, Requests: c})
	}
	if h.cfg.History != nil {
		s := h.cfg.History.series(counts)
		v.Series = &s
	}
	if snap.Config != nil && snap.Config.Redis.Enabled() {
		v.Redis = redisNodes(snap, fams)
	}
	v.LLM = h.tenantStatuses(r.Context(), snap, fams)
	writeJSON(w, http.StatusOK, v)
}

// gathered serves already gathered families as a Gatherer.
type gathered map[string]*dto.MetricFamily

func (g gathered) Gather() ([]*dto.MetricFamily, error) {
	out := make([]*dto.MetricFamily, 0, len(g))
	for _, f := range g {
		out = append(out, f)
	}
	return out, nil
}

// redisNodes reads the breaker and error metrics, per node when they carry
// a node label, else as one entry for the whole backend.
func redisNodes(snap *policies.Snapshot, fams map[string]*dto.MetricFamily) *redisStatus {
	rs := &redisStatus{Nodes: []nodeStatus{}}
	for _, a := range snap.Config.Redis.Addrs {
		rs.Addrs = append(rs.Addrs, policies.ShownURL(a))
	}
	nodes := map[string]*nodeStatus{}
	node := func(m *dto.Metric) *nodeStatus {
		name := label(m.GetLabel(), "node")
		if name == "" {
			name = "all"
		}
		n := nodes[name]
		if n == nil {
			n = &nodeStatus{Node: name}
			nodes[name] = n
		}
		return n
	}
	for name, set := range map[string]func(*nodeStatus, float64){
		"gateway_redis_breaker_open":        func(n *nodeStatus, v float64) { n.BreakerOpen = n.BreakerOpen || v > 0 },
		"gateway_redis_breaker_opens_total": func(n *nodeStatus, v float64) { n.BreakerOpens += uint64(v) },
		"gateway_redis_errors_total":        func(n *nodeStatus, v float64) { n.Errors += uint64(v) },
		"gateway_redis_timeouts_total":      func(n *nodeStatus, v float64) { n.Timeouts += uint64(v) },
		"gateway_redis_fail_fast_total":     func(n *nodeStatus, v float64) { n.FailFast += uint64(v) },
	} {
		for _, m := range fams[name].GetMetric() {
			val := m.GetCounter().GetValue()
			if m.Gauge != nil {
				val = m.GetGauge().GetValue()
			}
			set(node(m), val)
		}
	}
	for _, n := range nodes {
		rs.Nodes = append(rs.Nodes, *n)
	}
	slices.SortFunc(rs.Nodes, func(a, b nodeStatus) int { return strings.Compare(a.Node, b.Node) })
	return rs
}

// tenantStatuses sums each tenant's LLM tokens and dollars over models, and
// reads what is left of each quota keyed by tenant alone that counts
// tokens or dollars.
func (h *handler) tenantStatuses(ctx context.Context, snap *policies.Snapshot, fams map[string]*dto.MetricFamily) []tenantStatus {
	byName := map[string]*tenantStatus{}
	get := func(name string) *tenantStatus {
		t := byName[name]
		if t == nil {
			t = &tenantStatus{Tenant: name, Quotas: []quotaStatus{}}
			byName[name] = t
		}
		return t
	}
	for _, m := range fams["gateway_llm_tokens_total"].GetMetric() {
		get(label(m.GetLabel(), "tenant")).Tokens += uint64(m.GetCounter().GetValue())
	}
	// Summed in whole micro-dollars, as the metric keeps them, so that the
	// page shows the sum /metrics's series add up to.
	micro := map[string]int64{}
	for _, m := range fams["gateway_llm_cost_usd_total"].GetMetric() {
		name := label(m.GetLabel(), "tenant")
		get(name)
		micro[name] += int64(math.Round(m.GetCounter().GetValue() * 1e6))
	}
	for name, n := range micro {
		byName[name].USD = float64(n) / 1e6
	}
	var quotas []*policies.Policy
	for _, name := range sortedPolicies(snap) {
		p := snap.Policies[name]
		if strings.TrimSpace(p.KeySpec) == "tenant" && p.Cost.CountsTokens() {
			quotas = append(quotas, p)
		}
	}
	plans := map[string]string{}
	for _, t := range snap.Tenants.Keys {
		plans[t.Name] = t.Plan
	}
	for _, t := range snap.Tenants.Digests {
		plans[t.Name] = t.Plan
	}
	if len(quotas) > 0 {
		for name := range plans {
			get(name)
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]tenantStatus, 0, len(names))
	for i, name := range names {
		t := byName[name]
		t.Plan = plans[name]
		if i < maxQuotaTenants && h.cfg.Keys != nil {
			for _, p := range quotas {
				t.Quotas = append(t.Quotas, h.quotaOf(ctx, p, name, t.Plan))
			}
		}
		out = append(out, *t)
	}
	return out
}

func (h *handler) quotaOf(ctx context.Context, p *policies.Policy, tenant, plan string) quotaStatus {
	l := p.Limit
	if pl, ok := p.Plans[plan]; ok {
		l = pl
	}
	q := quotaStatus{Policy: p.Name(), Cost: string(p.Cost), Per: l.Per(), Limit: l.Quota()}
	d, err := h.cfg.Keys.Peek(ctx, limiter.Check{Rule: p.Rule, Limit: l, Key: tenant, Cost: 1})
	if err != nil {
		q.Error = err.Error()
		return q
	}
	remaining := max(d.Remaining, 0)
	if !d.Allowed {
		remaining = 0
	}
	q.Used = max(q.Limit-remaining, 0)
	return q
}

// label returns the value of the label named name, or "".
func label(ls []*dto.LabelPair, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
