package metrics

import (
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxModels bounds the model label: the first MaxModels distinct model names
// a Metrics sees keep their own series, later ones are counted as
// OtherModel. Model names come from request bodies, so a client could
// otherwise create series at will.
const MaxModels = 64

// OtherModel is the model label of every model past the first MaxModels,
// and of a model name longer than maxModelLen or not UTF-8.
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
	mu     sync.Mutex                            // guards models and replacing series
	models map[string]struct{}                   // model labels with their own series
}

func newLLMCollector() *llmCollector {
	c := &llmCollector{
		tokensDesc: prometheus.NewDesc("gateway_llm_tokens_total",
			"Tokens charged to tenants on llm routes, by tenant and model.", []string{"tenant", "model"}, nil),
		costDesc: prometheus.NewDesc("gateway_llm_cost_usd_total",
			"Cost charged to tenants on llm routes in US dollars, by tenant and model.", []string{"tenant", "model"}, nil),
		models: make(map[string]struct{}),
	}
	c.series.Store(&map[llmKey]*llmCounts{})
	return c
}

// LLMCharge adds what one LLM call was charged: tokens
// (gateway_llm_tokens_total) and microUSD millionths of a dollar
// (gateway_llm_cost_usd_total), under the tenant (from the config) and the
// model the request named, bounded: past MaxModels distinct names, or for a
// name that is too long or not UTF-8, the model is OtherModel. Negative
// amounts count as zero: these are counters.
func (m *Metrics) LLMCharge(tenant, model string, tokens int64, microUSD int64) {
	if m == nil || !utf8.ValidString(tenant) {
		return
	}
	c := m.llm.counts(tenant, model)
	c.tokens.Add(max(tokens, 0))
	c.microUSD.Add(max(microUSD, 0))
}

// counts returns the totals of (tenant, model), model bounded.
func (c *llmCollector) counts(tenant, model string) *llmCounts {
	if n, ok := (*c.series.Load())[llmKey{tenant, model}]; ok {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	label := model
	if _, seen := c.models[model]; !seen {
		if len(c.models) >= MaxModels || len(model) > maxModelLen || !utf8.ValidString(model) {
			label = OtherModel
		} else {
			c.models[model] = struct{}{}
		}
	}
	// A folded model is looked up as OtherModel every time: caching its own
	// name would let the cache grow with every name a client invents.
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
