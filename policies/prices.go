package policies

import (
	"maps"
	"math"

	"github.com/ratelimit-gateway/gateway/llm"
)

// A price in the file is US dollars per million tokens; the snapshot holds
// it in pico-dollars a token (llm.Rates). A rate left at 0 takes its
// default: cached_input the input's, cache_write_5m 1.25 × and
// cache_write_1h 2 × the input's (Anthropic's published multipliers, the
// dearest a cache write costs at any provider); audio rates have none,
// and a request that carries or asks for audio on a model whose entry
// prices none is refused (see llm.Price.Reach).

// rateFields are one set of rates in the file, by key.
type rateFields struct {
	place                                      string
	input, cached, output, w5m, w1h, aIn, aOut float64
}

func (r rateFields) each() []struct {
	key string
	v   float64
} {
	return []struct {
		key string
		v   float64
	}{{"input", r.input}, {"cached_input", r.cached}, {"output", r.output}, {"cache_write_5m", r.w5m},
		{"cache_write_1h", r.w1h}, {"audio_input", r.aIn}, {"audio_output", r.aOut}}
}

func (pc PriceConfig) fields(place string) rateFields {
	return rateFields{place, pc.Input, pc.CachedInput, pc.Output, pc.CacheWrite5m, pc.CacheWrite1h, pc.AudioInput, pc.AudioOutput}
}

func (rc RatesConfig) fields(place string) rateFields {
	return rateFields{place, rc.Input, rc.CachedInput, rc.Output, rc.CacheWrite5m, rc.CacheWrite1h, rc.AudioInput, rc.AudioOutput}
}

func (lc LongContextConfig) fields(place string) rateFields {
	return rateFields{place, lc.Input, lc.CachedInput, lc.Output, lc.CacheWrite5m, lc.CacheWrite1h, lc.AudioInput, lc.AudioOutput}
}

// validate checks one set of rates; needOutput says output must be set.
func (r rateFields) validate(p *problems, needOutput bool) {
	for _, f := range r.each() {
		switch {
		case math.IsNaN(f.v) || f.v > MaxPrice:
			p.addf(r.place+"."+f.key, "must be a number up to %g dollars per million tokens", float64(MaxPrice))
		case f.v < 0:
			p.add(r.place+"."+f.key, "must not be negative")
		}
	}
	if r.input >= 0 && r.cached > r.input {
		// The reservation prices every input token uncached: the most a
		// call can cost only while cached input is not dearer.
		p.add(r.place+".cached_input", "must not be more than input")
	}
	if r.input == 0 && r.output == 0 {
		p.add(r.place, "input and output are both 0: set a price (a free model is spelled with a tiny one, never by accident)")
	} else if needOutput && r.output == 0 {
		p.add(r.place+".output", "must be set: crossing the threshold reprices the output too (or set whole_request: false)")
	}
}

func validatePrices(p *problems, c *Config) {
	warnDefaultPriced(p, c)
	for _, model := range sortedKeys(c.Prices) {
		pc, place := c.Prices[model], keyPlace("prices", model)
		pc.fields(place).validate(p, false)
		for _, tier := range sortedKeys(pc.Tiers) {
			tplace := keyPlace(place+".tiers", tier)
			switch {
			case !llm.ServiceTierOK(tier):
				p.addf(tplace, "must be a service tier's name (a-z, 0-9, _), got %q", tier)
			case llm.StandardTier(tier) || tier == "auto":
				p.addf(tplace, "%q is the standard tier, which the entry's own input and output price", tier)
			}
			pc.Tiers[tier].fields(tplace).validate(p, false)
		}
		if lc := pc.LongContext; lc != nil {
			lplace := place + ".long_context"
			if lc.Threshold <= 0 {
				p.addf(lplace+".threshold", "must be > 0 input tokens, got %d", lc.Threshold)
			}
			lc.fields(lplace).validate(p, lc.WholeRequest == nil || *lc.WholeRequest)
		}
	}
}

// compilePrices builds the snapshot's price table: the built-in list under
// the file's entries when builtin_prices is set (an entry the file names
// replaces the built-in one whole).
func compilePrices(c *Config) Prices {
	if len(c.Prices) == 0 && !c.BuiltinPrices {
		return nil
	}
	out := make(Prices, len(c.Prices))
	if c.BuiltinPrices {
		maps.Copy(out, llm.ListPrices())
	}
	for model, pc := range c.Prices {
		pr := Price{Entry: model, Rates: pc.fields("").rates()}
		if len(pc.Tiers) > 0 {
			pr.Tiers = make(map[string]llm.Rates, len(pc.Tiers))
			for tier, rc := range pc.Tiers {
				pr.Tiers[tier] = rc.fields("").rates()
			}
		}
		if lc := pc.LongContext; lc != nil {
			pr.LongContext = &llm.LongContext{Threshold: lc.Threshold, WholeRequest: lc.WholeRequest == nil || *lc.WholeRequest,
				Rates: lc.fields("").rates()}
		}
		out[model] = pr
	}
	return out
}

// rates converts r to pico-dollars a token, its defaults filled in.
func (r rateFields) rates() llm.Rates {
	return llm.RatesOf(r.input, r.cached, r.output, r.w5m, r.w1h, r.aIn, r.aOut)
}

// warnDefaultPriced warns, when the table has a default entry, about each
// model the config names (admin.metrics_models) that falls to it: a model
// a usd policy pays for at a price the operator may not mean.
func warnDefaultPriced(p *problems, c *Config) {
	if _, ok := c.Prices[DefaultPriceModel]; !ok {
		return
	}
	names := make(Prices, len(c.Prices))
	if c.BuiltinPrices {
		names = llm.ListPrices()
	}
	for m := range c.Prices {
		names[m] = Price{}
	}
	for i, m := range c.Admin.MetricsModels {
		if _, dflt := names.For(m); dflt {
			p.warnf(indexPlace("admin.metrics_models", i), "the price table has no entry for %q (nor for its name without a date): cost: usd prices it at prices.default", m)
		}
	}
}
