package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// PicoPerMicro is how many pico-dollars make a micro-dollar, the unit of a
// usd policy. Prices are held in pico-dollars a token ($1 a million tokens
// is 1,000,000 p$ a token), so every price a provider publishes, down to
// its third decimal, is an integer, and a call's cost is a sum of integer
// products that saturates instead of wrapping.
const PicoPerMicro = 1_000_000

// Rates are what each kind of token costs at one tier, in pico-dollars a
// token. A zero AudioInput or AudioOutput says the entry does not price
// audio: a request that asks for it is refused (see Price.Reach), and audio
// a response reports anyway is charged at the entry's dearest rate.
type Rates struct {
	Input, CachedInput, Output int64
	// CacheWrite5m and CacheWrite1h are Anthropic's prompt cache writes,
	// by the cache_control ttl they were written with.
	CacheWrite5m, CacheWrite1h int64
	AudioInput, AudioOutput    int64
}

// dearest is the highest of r's rates.
func (r Rates) dearest() int64 {
	return max(r.Input, r.CachedInput, r.Output, r.CacheWrite5m, r.CacheWrite1h, r.AudioInput, r.AudioOutput)
}

// maxRates is each rate's highest of a and b.
func maxRates(a, b Rates) Rates {
	return Rates{
		Input: max(a.Input, b.Input), CachedInput: max(a.CachedInput, b.CachedInput), Output: max(a.Output, b.Output),
		CacheWrite5m: max(a.CacheWrite5m, b.CacheWrite5m), CacheWrite1h: max(a.CacheWrite1h, b.CacheWrite1h),
		AudioInput: max(a.AudioInput, b.AudioInput), AudioOutput: max(a.AudioOutput, b.AudioOutput),
	}
}

// LongContext is the dearer price a provider bills a request whose input
// passes a threshold (Anthropic's over 200,000 input tokens, cache reads
// and writes counted).
type LongContext struct {
	// Threshold is the most input tokens billed at the ordinary rates.
	Threshold int64
	// WholeRequest says crossing it bills every token of the request,
	// output included, at Rates; otherwise only its input tokens.
	WholeRequest bool
	Rates        Rates
}

// Price is what one model costs: Rates at the standard tier, each other
// service_tier's rates, and a long-context price. The zero value prices
// nothing at zero; it is a value, safe for concurrent use.
type Price struct {
	// Entry is the price table's entry it came from (the model's name, its
	// name without a date, or "default").
	Entry string
	Rates
	// Tiers are the rates of each service_tier other than the standard
	// one ("default" at OpenAI, "standard" at Anthropic), by name.
	Tiers map[string]Rates
	// LongContext is nil for a model without a long-context price.
	LongContext *LongContext
}

// StandardTier reports whether tier names the standard tier, which a
// price's own Rates price: OpenAI's "default", Anthropic's "standard" (and
// the "standard_only" a request asks it with).
func StandardTier(tier string) bool {
	return tier == "" || tier == "default" || tier == "standard" || tier == "standard_only"
}

// tier returns the rates of tier and whether the price has them.
func (p *Price) tier(tier string) (Rates, bool) {
	if StandardTier(tier) {
		return p.Rates, true
	}
	r, ok := p.Tiers[tier]
	return r, ok
}

// dearest is the highest of every rate the price has, at any tier.
func (p *Price) dearest() int64 {
	d := p.Rates.dearest()
	for _, r := range p.Tiers {
		d = max(d, r.dearest())
	}
	if p.LongContext != nil {
		d = max(d, p.LongContext.Rates.dearest())
	}
	return d
}

// Ask is what a request asks of a price: the tiers it may be served at,
// whether it carries or asks for audio, how much input it may bill.
type Ask struct {
	// Kind is the API the call is made on.
	Kind Kind
	// ServiceTier is the request's service_tier ("" when absent);
	// DefaultTier the tier the provider serves "auto" and no tier at
	// ("" for the standard tier).
	ServiceTier, DefaultTier string
	// AudioInput says the request carries audio; AudioOutput that it asks
	// for audio back.
	AudioInput, AudioOutput bool
	// PromptTokens is the reserved input.
	PromptTokens int64
	// ContextWindow is the model family's: a prompt past it is one the
	// provider bills at a long-context price (Anthropic's 1M-token window
	// past the 200,000 of its family) or refuses.
	ContextWindow int64
}

// tiers returns the tiers a request asking for tier may be served at,
// where auto (and no tier) is served at def: priority and scale fall back
// to the standard tier when their capacity is spent.
func tiers(tier, def string) []string {
	if tier == "" || tier == "auto" {
		tier = def
	}
	switch {
	case StandardTier(tier):
		return []string{"default"}
	case tier == "priority", tier == "scale":
		return []string{tier, "default"}
	}
	return []string{tier}
}

// longContextMargin is how far under a long-context threshold an estimated
// prompt must stay to be reserved at the ordinary rates: the estimate
// counts with a tokenizer that is not always the provider's.
const longContextMargin = 4 // the estimate and a quarter of it must stay under the threshold

// Reach is what a call asking ask may be billed at: every rate at the
// highest of the tiers it may be served at, and at the long-context price
// when its input may pass the threshold. It refuses, with a message for
// the client, what the price cannot bound: a tier the entry does not price,
// audio it does not price.
func (p *Price) Reach(ask Ask) (Rates, error) {
	var r Rates
	for _, t := range tiers(ask.ServiceTier, ask.DefaultTier) {
		tr, ok := p.tier(t)
		if !ok {
			return Rates{}, fmt.Errorf("the price table has no price for service_tier %q of this model (prices.%s.tiers): ask for another tier", t, p.Entry)
		}
		// Each tier must price the audio asked for: another tier's audio
		// price is not a bound of this one's.
		if ask.AudioInput && tr.AudioInput == 0 {
			return Rates{}, fmt.Errorf("the price table has no audio input price for this model at service_tier %q (prices.%s): send no audio", t, p.Entry)
		}
		if ask.AudioOutput && tr.AudioOutput == 0 {
			return Rates{}, fmt.Errorf("the price table has no audio output price for this model at service_tier %q (prices.%s): ask for text", t, p.Entry)
		}
		r = maxRates(r, tr)
	}
	if p.MayReachLongContext(ask.PromptTokens) {
		r = p.longContext(r)
	}
	if p.LongContext == nil && ask.ContextWindow > 0 && ask.PromptTokens > ask.ContextWindow {
		return Rates{}, fmt.Errorf("the prompt's %d tokens pass the model's context window (%d), and the price table has no long-context price for this model (prices.%s.long_context)",
			ask.PromptTokens, ask.ContextWindow, p.Entry)
	}
	if ask.Kind != AnthropicMessages {
		// Only Anthropic bills cache writes; elsewhere a cache is free to write.
		r.CacheWrite5m, r.CacheWrite1h = 0, 0
	}
	if !ask.AudioInput {
		r.AudioInput = 0
	}
	if !ask.AudioOutput {
		r.AudioOutput = 0
	}
	return r, nil
}

// MayReachLongContext reports whether a call whose prompt is estimated at
// prompt tokens is reserved at the long-context price: the estimate plus
// a quarter of itself passes the threshold (it is more than four fifths
// of it).
func (p *Price) MayReachLongContext(prompt int64) bool {
	lc := p.LongContext
	return lc != nil && AddSat(prompt, prompt/longContextMargin) > lc.Threshold
}

// longContext is r at the long-context price: each rate the highest of
// r's and the long-context one, the input's alone unless it reprices the
// whole request.
func (p *Price) longContext(r Rates) Rates {
	lc := p.LongContext
	if lc.WholeRequest {
		return maxRates(r, lc.Rates)
	}
	out := maxRates(r, lc.Rates)
	out.Output, out.AudioOutput = r.Output, r.AudioOutput
	return out
}

// BoundMicroUSD is the most a call can cost at reach: every input token at
// the dearest input rate reach has (a cache write, audio), every output
// token at the dearest output rate, rounded up to a micro-dollar.
func BoundMicroUSD(reach Rates, input, output int64) int64 {
	in := max(reach.Input, reach.CachedInput, reach.CacheWrite5m, reach.CacheWrite1h, reach.AudioInput)
	out := max(reach.Output, reach.AudioOutput)
	return picoToMicro(AddSat(MulSat(max(input, 0), in), MulSat(max(output, 0), out)))
}

// OutputMicroUSD is what n output tokens cost at reach's dearest output
// rate: a stream's window.
func OutputMicroUSD(reach Rates, n int64) int64 {
	return picoToMicro(MulSat(max(n, 0), max(reach.Output, reach.AudioOutput)))
}

// CostMicroUSD is what a response's usage u costs, rounded up to a
// micro-dollar: at the tier it reports it was served at (reach's rates,
// the most the call could cost, when it reports none; the price's
// dearest rates for a tier the price does not name), at the long-context
// price when its input passed the threshold. A split the rates do not
// price (audio a text model's entry has no price for) is charged the
// price's dearest rate.
func (p *Price) CostMicroUSD(u Usage, reach Rates) int64 {
	r := reach
	if u.ServiceTier != "" {
		if tr, ok := p.tier(u.ServiceTier); ok {
			r = tr
		} else {
			r = p.dearestRates()
		}
	}
	if lc := p.LongContext; lc != nil && max(u.Input, 0) > lc.Threshold {
		r = p.longContext(r)
	}
	dear := p.dearest()
	or := func(rate int64) int64 {
		if rate == 0 {
			return dear
		}
		return rate
	}
	in, out := max(u.Input, 0), max(u.Output, 0)
	// Each split is taken out of what the input has left, so none can
	// make another negative nor the sum pass the input.
	cached := clamp(u.CachedInput, in)
	rest := in - cached
	w1h := clamp(u.CacheWrite1h, rest)
	rest -= w1h
	w5m := clamp(u.CacheWrite5m, rest)
	rest -= w5m
	// Cache writes the response does not split by ttl are priced as 1h ones.
	unsplit := clamp(max(u.CacheWrite, 0)-w1h-w5m, rest)
	rest -= unsplit
	w1h += unsplit
	audioIn := clamp(u.AudioInput, rest)
	text := rest - audioIn
	audioOut := clamp(u.AudioOutput, out)
	var pico int64
	for _, t := range [...]struct{ n, rate int64 }{
		{text, r.Input}, {cached, r.CachedInput}, {w5m, or(r.CacheWrite5m)}, {w1h, or(r.CacheWrite1h)},
		{audioIn, or(r.AudioInput)}, {out - audioOut, r.Output}, {audioOut, or(r.AudioOutput)},
	} {
		if t.n > 0 {
			pico = AddSat(pico, MulSat(t.n, t.rate))
		}
	}
	return picoToMicro(pico)
}

// dearestRates is every rate at its highest across the price's tiers.
func (p *Price) dearestRates() Rates {
	r := p.Rates
	for _, name := range sortedTiers(p.Tiers) {
		r = maxRates(r, p.Tiers[name])
	}
	return r
}

func sortedTiers(m map[string]Rates) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// clamp is n within [0, most].
func clamp(n, most int64) int64 {
	return max(min(n, most), 0)
}

// picoToMicro rounds pico-dollars up to micro-dollars: a call is never
// cheaper than it was.
func picoToMicro(p int64) int64 {
	if p == math.MaxInt64 {
		return math.MaxInt64
	}
	return p/PicoPerMicro + min(p%PicoPerMicro, 1)
}

// Prices is a price table by entry name. Lookup (For) takes the model's
// name, else its name without a date suffix, else the "default" entry;
// never a shorter prefix, which may be another, cheaper model (o3 for
// o3-pro).
type Prices map[string]Price

// DefaultPriceEntry names the entry that prices every model the table
// does not name.
const DefaultPriceEntry = "default"

// For returns model's price, and whether it is the default entry's.
func (p Prices) For(model string) (Price, bool) {
	if pr, ok := p[model]; ok {
		return pr, false
	}
	if base, ok := Undated(model); ok {
		if pr, ok := p[base]; ok {
			return pr, false
		}
	}
	return p[DefaultPriceEntry], true
}

// Undated returns model without a snapshot's date suffix (-2025-06-10 or
// -20250610), and whether it had one.
func Undated(model string) (string, bool) {
	digits := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	n := len(model)
	if n > 11 && model[n-11] == '-' && model[n-6] == '-' && model[n-3] == '-' &&
		digits(model[n-10:n-6]) && digits(model[n-5:n-3]) && digits(model[n-2:]) {
		return model[:n-11], true
	}
	if n > 9 && model[n-9] == '-' && digits(model[n-8:]) {
		return model[:n-9], true
	}
	return model, false
}

// ServiceTierOK reports whether a provider's tier name is one a price
// table may name: lower-case letters, digits and _ (at most 32).
func ServiceTierOK(tier string) bool {
	if tier == "" || len(tier) > 32 {
		return false
	}
	return strings.IndexFunc(tier, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) < 0
}

// tierOf is the service_tier string of a raw JSON value, "" for anything
// else.
func tierOf(v []byte) string {
	var s string
	if len(v) == 0 || json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// maxTierLen bounds a request's service_tier: it is quoted back in errors.
const maxTierLen = 64

// pricing reads what a request's price depends on beyond its tokens: its
// service_tier (a string, or null), and whether it asks for audio back (a
// modalities array naming "audio", or an audio object).
func pricing(w *wireRequest) (tier string, audio bool, err error) {
	if len(w.ServiceTier) > 0 && string(w.ServiceTier) != "null" {
		if err := json.Unmarshal(w.ServiceTier, &tier); err != nil {
			return "", false, fmt.Errorf("service_tier: %w", err)
		}
		if len(tier) > maxTierLen {
			return "", false, fmt.Errorf("service_tier is %d bytes: no tier is named with more than %d", len(tier), maxTierLen)
		}
	}
	if len(w.Modalities) > 0 && string(w.Modalities) != "null" {
		var ms []string
		if err := json.Unmarshal(w.Modalities, &ms); err != nil {
			return "", false, fmt.Errorf("modalities: %w", err)
		}
		audio = slices.Contains(ms, "audio")
	}
	if a := bytes.TrimSpace(w.Audio); len(a) > 0 && string(a) != "null" {
		audio = true
	}
	return tier, audio, nil
}
