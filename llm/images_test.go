package llm

import (
	"strings"
	"testing"
)

// Images and speech are bounded before they are forwarded: gpt-image by n
// × its output tokens at size and quality (auto the largest) plus the
// prompt; dall-e and tts-1 at their price per image or character; a
// gpt-4o tts model by its input plus the most audio it can make.
func TestParseImagesAndSpeech(t *testing.T) {
	long := strings.Repeat("a", 100)
	for _, tc := range []struct {
		name        string
		kind        Kind
		body        string
		output, usd int64
		noUsage     bool
		err         string
	}{
		{"gpt-image auto", ImageGenerations, `{"model":"gpt-image-1","prompt":"x","n":3}`, 3 * 6240, 0, false, ""},
		{"gpt-image low square", ImageGenerations, `{"model":"gpt-image-1","prompt":"x","quality":"low","size":"1024x1024"}`, 272, 0, false, ""},
		{"gpt-image partial images", ImageGenerations, `{"model":"gpt-image-1","prompt":"x","n":2,"quality":"high","size":"1024x1024","stream":true,"partial_images":3}`, 2 * 4460, 0, false, ""},
		{"dall-e-3 hd auto size", ImageGenerations, `{"model":"dall-e-3","prompt":"x","quality":"hd"}`, 6240, 120_000, true, ""},
		{"dall-e-2 ten", ImageGenerations, `{"model":"dall-e-2","prompt":"x","n":10,"size":"256x256"}`, 10 * 6240, 160_000, true, ""},
		{"no model", ImageGenerations, `{"prompt":"x"}`, 0, 0, false, "model is required"},
		{"n past 10", ImageGenerations, `{"model":"gpt-image-1","prompt":"x","n":11}`, 0, 0, false, "n must be between 1 and 10"},
		{"n as 1e1", ImageGenerations, `{"model":"gpt-image-1","prompt":"x","n":1e1}`, 0, 0, false, "invalid request"},
		{"unknown size", ImageGenerations, `{"model":"gpt-image-1","prompt":"x","size":"4096x4096"}`, 0, 0, false, "size"},
		{"dall-e-3 n 2", ImageGenerations, `{"model":"dall-e-3","prompt":"x","n":2}`, 0, 0, false, "n: 1 only"},
		{"unknown image model", ImageGenerations, `{"model":"flux","prompt":"x"}`, 0, 0, false, "no image model"},
		{"tts-1-hd", Speech, `{"model":"tts-1-hd","input":"` + long + `"}`, 0, 3000, true, ""},
		{"gpt-4o-mini-tts", Speech, `{"model":"gpt-4o-mini-tts","input":"` + long + `"}`, 100 * SpeechTokensPerChar, 0, true, ""},
		{"input too long", Speech, `{"model":"tts-1","input":"` + strings.Repeat("a", 4097) + `"}`, 0, 0, false, "past the 4096"},
		{"unknown speech model", Speech, `{"model":"voice-9","input":"x"}`, 0, 0, false, "no speech model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRequest(tc.kind, []byte(tc.body))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.MaxOutput != tc.output || r.UnitMicroUSD != tc.usd || r.NoUsage != tc.noUsage {
				t.Errorf("got output %d, usd %d, no usage %v; want %d, %d, %v", r.MaxOutput, r.UnitMicroUSD, r.NoUsage, tc.output, tc.usd, tc.noUsage)
			}
		})
	}
}
