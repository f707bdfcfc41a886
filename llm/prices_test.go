package llm

import (
	"io"
	"math"
	"strings"
	"testing"
)

// A model's price is its name's, else its name without a snapshot date's,
// else the default's: never a shorter name's (o3 is not o3-pro).
func TestPricesForSnapshots(t *testing.T) {
	p := Prices{
		"default":         {Entry: "default"},
		"o3":              {Entry: "o3"},
		"o3-pro":          {Entry: "o3-pro"},
		"claude-sonnet-4": {Entry: "claude-sonnet-4"},
	}
	for _, tt := range []struct {
		model, want string
		dflt        bool
	}{
		{"o3-pro", "o3-pro", false},
		{"o3-pro-2025-06-10", "o3-pro", false},
		{"claude-sonnet-4-20250514", "claude-sonnet-4", false},
		{"o3-pro-preview", "default", true},
		{"o3-mini-2025-01-31", "default", true},
		{"o3-pro-2025-6-10", "default", true},
		{"o3-pro-2025061", "default", true},
		{"2025-06-10", "default", true},
	} {
		got, dflt := p.For(tt.model)
		if got.Entry != tt.want || dflt != tt.dflt {
			t.Errorf("%s: got %q (default %v), want %q (default %v)", tt.model, got.Entry, dflt, tt.want, tt.dflt)
		}
	}
}

func testPrice() Price {
	return Price{
		Entry: "m",
		Rates: RatesOf(2, 1, 10, 0, 0, 40, 80),
		Tiers: map[string]Rates{
			"priority": RatesOf(4, 2, 20, 0, 0, 0, 0),
			"flex":     RatesOf(1, 0.5, 5, 0, 0, 0, 0),
		},
		LongContext: &LongContext{Threshold: 1000, WholeRequest: true, Rates: RatesOf(4, 0.4, 15, 0, 0, 0, 0)},
	}
}

// A call reserves at the dearest tier it may be served at and the
// long-context price when its input may cross the threshold; what the
// entry cannot price is refused.
func TestPriceReach(t *testing.T) {
	p := testPrice()
	for _, tt := range []struct {
		name    string
		ask     Ask
		in, out int64 // the rates a token is reserved at
		refused string
	}{
		{"no tier", Ask{Kind: ChatCompletions}, 2_000_000, 10_000_000, ""},
		{"auto at a priority project", Ask{Kind: ChatCompletions, ServiceTier: "auto", DefaultTier: "priority"}, 4_000_000, 20_000_000, ""},
		{"priority may fall to default", Ask{Kind: ChatCompletions, ServiceTier: "priority"}, 4_000_000, 20_000_000, ""},
		{"flex", Ask{Kind: ChatCompletions, ServiceTier: "flex"}, 1_000_000, 5_000_000, ""},
		{"scale, unpriced", Ask{Kind: ChatCompletions, ServiceTier: "scale"}, 0, 0, `service_tier "scale"`},
		{"audio out", Ask{Kind: ChatCompletions, AudioOutput: true}, 2_000_000, 80_000_000, ""},
		{"audio in", Ask{Kind: ChatCompletions, AudioInput: true}, 40_000_000, 10_000_000, ""},
		{"audio at a tier without it", Ask{Kind: ChatCompletions, ServiceTier: "priority", AudioOutput: true}, 0, 0, "audio output"},
		{"anthropic: a cache write at 1h", Ask{Kind: AnthropicMessages}, 4_000_000, 10_000_000, ""},
		{"long context within the margin", Ask{Kind: ChatCompletions, PromptTokens: 801}, 4_000_000, 15_000_000, ""},
		{"short", Ask{Kind: ChatCompletions, PromptTokens: 700}, 2_000_000, 10_000_000, ""},
		{"past the window, with a long-context price", Ask{Kind: ChatCompletions, PromptTokens: 5000, ContextWindow: 2000}, 4_000_000, 15_000_000, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := p.Reach(tt.ask)
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("got %+v, %v; want refused for %s", r, err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := BoundMicroUSD(r, 1, 0) * PicoPerMicro; got != tt.in {
				t.Errorf("input: got %d p$, want %d", got, tt.in)
			}
			if got := BoundMicroUSD(r, 0, 1) * PicoPerMicro; got != tt.out {
				t.Errorf("output: got %d p$, want %d", got, tt.out)
			}
		})
	}
}

// A response is settled at the tier it reports, each kind of token at its
// rate; what the entry does not price at its dearest rate.
func TestPriceCost(t *testing.T) {
	p := testPrice()
	reach, err := p.Reach(Ask{Kind: ChatCompletions, ServiceTier: "priority"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		u    Usage
		want int64 // micro-dollars
	}{
		{"served at default", Usage{Input: 1000, Output: 100, ServiceTier: "default"}, 2*1000 + 10*100},
		{"served at priority", Usage{Input: 1000, Output: 100, ServiceTier: "priority"}, 4*1000 + 20*100},
		{"no tier reported: the reservation's", Usage{Input: 1000, Output: 100}, 4*1000 + 20*100},
		{"a tier the entry does not name: each rate at its dearest tier", Usage{Input: 100, Output: 10, ServiceTier: "scale"}, 4*100 + 20*10},
		{"cached and audio", Usage{Input: 900, CachedInput: 500, AudioInput: 100, Output: 100, AudioOutput: 60, ServiceTier: "default"},
			2*300 + 1*500 + 40*100 + 10*40 + 80*60},
		{"audio at a tier without it: the dearest", Usage{Input: 10, AudioInput: 10, ServiceTier: "flex"}, 80 * 10},
		{"long context reprices the output", Usage{Input: 1001, Output: 10, ServiceTier: "default"}, 4*1001 + 15*10},
		{"a fraction rounds up", Usage{Input: 1, CachedInput: 1, ServiceTier: "flex"}, 1},
		{"saturates", Usage{Input: math.MaxInt64, ServiceTier: "default"}, math.MaxInt64},
	} {
		if got := p.CostMicroUSD(tt.u, reach); got != tt.want {
			t.Errorf("%s: got %d µ$, want %d", tt.name, got, tt.want)
		}
	}
	// Anthropic cache writes by ttl; a total not split is priced as 1h.
	a := Price{Entry: "claude", Rates: RatesOf(3, 0.3, 15, 0, 0, 0, 0)}
	for _, tt := range []struct {
		name string
		u    Usage
		want int64 // pico-dollars
	}{
		{"5m and 1h", Usage{Input: 1100, CacheWrite: 1000, CacheWrite5m: 400, CacheWrite1h: 600, Output: 0}, 3_000_000*100 + 3_750_000*400 + 6_000_000*600},
		{"not split", Usage{Input: 1100, CacheWrite: 1000}, 3_000_000*100 + 6_000_000*1000},
		{"hostile splits stay within the input", Usage{Input: 100, CacheWrite: math.MinInt64, CacheWrite5m: math.MaxInt64, CacheWrite1h: -5, AudioInput: math.MaxInt64},
			3_750_000 * 100},
	} {
		if got := a.CostMicroUSD(tt.u, a.Rates); got != tt.want/PicoPerMicro {
			t.Errorf("%s: got %d µ$, want %d", tt.name, got, tt.want/PicoPerMicro)
		}
	}
}

// A stream's usage carries the splits a price needs: the served tier of a
// chat stream (beside its usage) and a responses stream, Anthropic's cache
// writes by ttl and its tier, as message_start and message_delta say.
func TestStreamUsageCarriesTheSplits(t *testing.T) {
	for _, tt := range []struct {
		name string
		kind Kind
		sse  string
		want Usage
	}{
		{"chat", ChatCompletions,
			"data: {\"service_tier\":\"priority\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
				"data: {\"service_tier\":\"default\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":20,\"completion_tokens_details\":{\"audio_tokens\":15}}}\n\ndata: [DONE]\n\n",
			Usage{Input: 10, Output: 20, Total: 30, AudioOutput: 15, ServiceTier: "default"}},
		{"responses", Responses,
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"flex\",\"usage\":{\"input_tokens\":5,\"output_tokens\":6}}}\n\n",
			Usage{Input: 5, Output: 6, Total: 11, ServiceTier: "flex"}},
		{"anthropic", AnthropicMessages,
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":300,\"cache_creation\":{\"ephemeral_5m_input_tokens\":100,\"ephemeral_1h_input_tokens\":200},\"output_tokens\":1}}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40,\"service_tier\":\"priority\"}}\n\n",
			Usage{Input: 310, Output: 40, Total: 350, CacheWrite: 300, CacheWrite5m: 100, CacheWrite1h: 200, ServiceTier: "priority"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := NewStreamWatcher(strings.NewReader(tt.sse), StreamConfig{Kind: tt.kind, Model: "m"})
			if _, err := io.Copy(io.Discard, w); err != nil {
				t.Fatal(err)
			}
			if got, ok := w.Usage(); !ok || got != tt.want {
				t.Errorf("got %+v (%v), want %+v", got, ok, tt.want)
			}
		})
	}
}

// What a response costs never passes what its call reserved, whatever the
// split of its tokens, while it reports no more tokens than were reserved,
// a tier the call could reach and no modality it did not ask for.
func FuzzPriceCostWithinReach(f *testing.F) {
	f.Add(uint8(0), int64(1000), int64(100), int64(10), int64(5), int64(5), int64(1), int64(50), uint8(1), true, false)
	f.Add(uint8(1), int64(5000), int64(2000), int64(0), int64(0), int64(0), int64(0), int64(0), uint8(0), false, true)
	f.Add(uint8(2), int64(1001), int64(10), int64(0), int64(900), int64(0), int64(0), int64(0), uint8(2), false, false)
	f.Fuzz(func(t *testing.T, askTier uint8, in, out, cached, w5m, w1h, audioIn, audioOut int64, served uint8, askAudioIn, askAudioOut bool) {
		p := testPrice()
		p.Tiers["priority"] = RatesOf(4, 2, 20, 0, 0, 50, 100)
		p.Tiers["flex"] = RatesOf(1, 0.5, 5, 0, 0, 20, 40)
		asks := []string{"", "priority", "flex", "auto"}
		ask := Ask{Kind: AnthropicMessages, ServiceTier: asks[int(askTier)%len(asks)], DefaultTier: "flex",
			AudioInput: askAudioIn, AudioOutput: askAudioOut, PromptTokens: max(in, 0)}
		reach, err := p.Reach(ask)
		if err != nil {
			t.Skip()
		}
		reachable := tiers(ask.ServiceTier, ask.DefaultTier)
		u := Usage{Input: in, Output: out, CachedInput: cached, CacheWrite: w5m + w1h, CacheWrite5m: w5m, CacheWrite1h: w1h,
			ServiceTier: reachable[int(served)%len(reachable)]}
		if askAudioIn {
			u.AudioInput = audioIn
		}
		if askAudioOut {
			u.AudioOutput = audioOut
		}
		if got, bound := p.CostMicroUSD(u, reach), BoundMicroUSD(reach, max(in, 0), max(out, 0)); got > bound {
			t.Fatalf("%+v at %+v: cost %d µ$, past the reservation %d", u, ask, got, bound)
		}
	})
}

// A request says what its price depends on: its service_tier, audio sent,
// audio asked back; a tier of the wrong type or too long is refused.
func TestRequestReadsWhatItsPriceDependsOn(t *testing.T) {
	audio := `{"type":"input_audio","input_audio":{"format":"wav","data":"AAAA"}}`
	for _, tt := range []struct {
		body         string
		tier         string
		audioIn, out bool
		err          string
	}{
		{`{"model":"m","messages":[]}`, "", false, false, ""},
		{`{"model":"m","service_tier":"priority","messages":[]}`, "priority", false, false, ""},
		{`{"model":"m","service_tier":null,"modalities":["text"],"messages":[]}`, "", false, false, ""},
		{`{"model":"m","modalities":["text","audio"],"messages":[]}`, "", false, true, ""},
		{`{"model":"m","audio":{"voice":"alloy"},"messages":[]}`, "", false, true, ""},
		{`{"model":"m","messages":[{"role":"user","content":[` + audio + `]}]}`, "", true, false, ""},
		{`{"model":"m","service_tier":2,"messages":[]}`, "", false, false, "service_tier"},
		{`{"model":"m","service_tier":"` + strings.Repeat("a", 65) + `","messages":[]}`, "", false, false, "service_tier is 65 bytes"},
		{`{"model":"m","modalities":"audio","messages":[]}`, "", false, false, "modalities"},
	} {
		r, err := ParseRequest(ChatCompletions, []byte(tt.body))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: got %v, want an error naming %s", tt.body, err, tt.err)
			}
			continue
		}
		if err != nil || r.ServiceTier != tt.tier || r.AudioInput != tt.audioIn || r.AudioOutput != tt.out {
			t.Errorf("%s: got tier %q, audio in %v, out %v (%v); want %q, %v, %v", tt.body, r.ServiceTier, r.AudioInput, r.AudioOutput, err, tt.tier, tt.audioIn, tt.out)
		}
	}
}

// A prompt past its model's context window on an entry without a
// long-context price is refused: the provider bills it at a price the
// table does not have.
func TestPriceRefusesAnUnpricedLongContext(t *testing.T) {
	p := Price{Entry: "claude-sonnet-4-5", Rates: RatesOf(3, 0.3, 15, 0, 0, 0, 0)}
	if _, err := p.Reach(Ask{Kind: AnthropicMessages, PromptTokens: 200_000, ContextWindow: 200_000}); err != nil {
		t.Fatalf("within the window: %v", err)
	}
	_, err := p.Reach(Ask{Kind: AnthropicMessages, PromptTokens: 200_001, ContextWindow: 200_000})
	if err == nil || !strings.Contains(err.Error(), "prices.claude-sonnet-4-5.long_context") {
		t.Fatalf("past the window: got %v, want a refusal naming the missing long_context", err)
	}
}
