package metrics

import (
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherModel is the model label of every model the config does not name
// (see SetModels), and of a name longer than maxModelLen or not UTF-8.
// Model names come from request bodies: a label per name sent would let any
// client create series at will, or, under a first-come cap, push the real
// models out of their own.
const OtherModel = "other"

// maxModelLen bounds one model label value in bytes; real model names
// ("gpt-4o-mini-2024-07-18") are far shorter.
const maxModelLen = 128

type llmKey struct{ tenant, model string }

// llmCounts are one (tenant, model)'s totals. Cost is kept in whole
// micro-dollars and divided once per scrape, so that millions of small
// charges add up exactly, which float additions would not.
type llmCounts struct {
	tokens, microUSD atomic.Int64
}

// llmCollector keeps the LLM charges (gateway_llm_tokens_total,
// gateway_llm_cost_usd_total) and exposes them at scrape time. It is safe
// for concurrent use.
type llmCollector struct {
	tokensDesc, costDesc *prometheus.Desc

	series atomic.Pointer[map[llmKey]*llmCounts] // read without a lock
	mu     sync.Mutex                            // guards replacing series
	// named are the models with a label of their own (SetModels); nil
	// until set: every model is OtherModel.
	named atomic.Pointer[map[string]struct{}]
}

func newLLMCollector() *llmCollector {
	c := &llmCollector{
		tokensDesc: prometheus.NewDesc("gateway_llm_tokens_total",
			"Tokens charged to tenants on llm routes, by tenant and model.", []string{"tenant", "model"}, nil),
		costDesc: prometheus.NewDesc("gateway_llm_cost_usd_total",
			"Cost charged to tenants on llm routes in US dollars, by tenant and model.", []string{"tenant", "model"}, nil),
	}
	c.series.Store(&map[llmKey]*llmCounts{})
	return c
}

// SetModels names the models that get a model label of their own: the
// config's (its price table and admin.metrics_models). Every other model is
// counted as OtherModel. A reload calls it again; series already counted
// stay. It is safe for concurrent use with LLMCharge.
func (m *Metrics) SetModels(models []string) {
	if m == nil {
		return
	}
	named := make(map[string]struct{}, len(models))
	for _, name := range models {
		if len(name) <= maxModelLen && utf8.ValidString(name) {
			named[name] = struct{}{}
		}
	}
	m.llm.named.Store(&named)
}

// LLMCharge adds what one LLM call was charged: tokens
// (gateway_llm_tokens_total) and microUSD millionths of a dollar
// (gateway_llm_cost_usd_total), under the tenant (from the config) and the
// model the request named when SetModels named it, OtherModel otherwise.
// Negative amounts count as zero: these are counters.
func (m *Metrics) LLMCharge(tenant, model string, tokens int64, microUSD int64) {
	if m == nil || !utf8.ValidString(tenant) {
		return
	}
	c := m.llm.counts(tenant, m.llm.label(model))
	c.tokens.Add(max(tokens, 0))
	c.microUSD.Add(max(microUSD, 0))
}

// label is model's label: itself when named, OtherModel otherwise.
func (c *llmCollector) label(model string) string {
	if named := c.named.Load(); named != nil {
		if _, ok := (*named)[model]; ok {
			return model
		}
	}
	return OtherModel
}

// counts returns the totals of (tenant, label).
func (c *llmCollector) counts(tenant, label string) *llmCounts {
	if n, ok := (*c.series.Load())[llmKey{tenant, label}]; ok {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.series.Load()
	k := llmKey{tenant, label}
	if n, ok := old[k]; ok {
		return n
	}
	n := &llmCounts{}
	next := make(map[llmKey]*llmCounts, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[k] = n
	c.series.Store(&next)
	return n
}

// Describe implements prometheus.Collector.
func (c *llmCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tokensDesc
	ch <- c.costDesc
}

// Collect implements prometheus.Collector.
func (c *llmCollector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range *c.series.Load() {
		ch <- prometheus.MustNewConstMetric(c.tokensDesc, prometheus.CounterValue, float64(n.tokens.Load()), k.tenant, k.model)
		ch <- prometheus.MustNewConstMetric(c.costDesc, prometheus.CounterValue, float64(n.microUSD.Load())/1e6, k.tenant, k.model)
	}
}
