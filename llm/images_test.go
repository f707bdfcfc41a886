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

// A transcription form is bounded by its file's bytes at
// WorstAudioBytesPerSecond; a form the gateway could read two ways is
// refused.
func TestParseTranscription(t *testing.T) {
	part := func(name, v string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + v + "\r\n"
	}
	file := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n\r\n" + strings.Repeat("x", 7500) + "\r\n"
	const ct = "multipart/form-data; boundary=B"
	for _, tc := range []struct {
		name, ct, body   string
		prompt, out, usd int64
		err              string
	}{
		{"whisper", ct, part("model", "whisper-1") + file + "--B--\r\n", 100, 0, 1000, ""},
		{"gpt-4o-transcribe", ct, part("model", "gpt-4o-transcribe") + file + "--B--\r\n", 100, MaxTranscriptTokens, 0, ""},
		{"model twice", ct, part("model", "whisper-1") + part("model", "gpt-4o-transcribe") + file + "--B--\r\n", 0, 0, 0, "twice"},
		{"two files", ct, part("model", "whisper-1") + file + file + "--B--\r\n", 0, 0, 0, "one file, named file"},
		{"a prompt past 64 KiB", ct, part("model", "whisper-1") + part("prompt", strings.Repeat("a", 70_000)) + file + "--B--\r\n", 0, 0, 0, "longer than"},
		{"no file", ct, part("model", "whisper-1") + "--B--\r\n", 0, 0, 0, "file is required"},
		{"json", "application/json", `{"model":"whisper-1"}`, 0, 0, 0, "multipart/form-data"},
		{"unknown model", ct, part("model", "parakeet") + file + "--B--\r\n", 0, 0, 0, "no transcription model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseTranscription(tc.ct, []byte(tc.body), DefaultModels(), Pace{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.PromptTokens != tc.prompt || r.MaxOutput != tc.out || r.UnitMicroUSD != tc.usd {
				t.Errorf("got prompt %d, output %d, usd %d; want %d, %d, %d", r.PromptTokens, r.MaxOutput, r.UnitMicroUSD, tc.prompt, tc.out, tc.usd)
			}
		})
	}
}

// An image edit is bounded as a generation plus each input image (and
// mask) at its family's high-detail bound; a variation is dall-e-2's, per
// image.
func TestParseImageUpload(t *testing.T) {
	part := func(name, v string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + v + "\r\n"
	}
	file := func(name string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"" + name + "\"; filename=\"a.png\"\r\n\r\npng\r\n"
	}
	const ct = "multipart/form-data; boundary=B"
	high := DefaultModels().For("gpt-image-1").ImageHigh
	for _, tc := range []struct {
		name     string
		kind     Kind
		body     string
		images   int64 // input images bounded in the prompt
		out, usd int64
		err      string
	}{
		{"edit, two images and a mask", ImageEdits, part("model", "gpt-image-1") + part("quality", "low") + part("size", "1024x1024") + file("image[]") + file("image[]") + file("mask") + "--B--\r\n", 3, 272, 0, ""},
		{"dall-e-2 variation of ten", ImageVariations, part("model", "dall-e-2") + part("n", "10") + part("size", "256x256") + file("image") + "--B--\r\n", 0, 10 * MaxImageOutputTokens, 160_000, ""},
		{"gpt-image variation", ImageVariations, part("model", "gpt-image-1") + file("image") + "--B--\r\n", 0, 0, 0, "no image model"},
		{"n as 1e1", ImageEdits, part("model", "gpt-image-1") + part("n", "1e1") + file("image") + "--B--\r\n", 0, 0, 0, "n must be between"},
		{"no image", ImageEdits, part("model", "gpt-image-1") + "--B--\r\n", 0, 0, 0, "image is required"},
		{"another file", ImageEdits, part("model", "gpt-image-1") + file("picture") + "--B--\r\n", 0, 0, 0, "none an image call takes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseImageUpload(tc.kind, ct, []byte(tc.body), DefaultModels(), Pace{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.PromptTokens < tc.images*high || r.PromptTokens > tc.images*high+10 || r.MaxOutput != tc.out || r.UnitMicroUSD != tc.usd {
				t.Errorf("got prompt %d, output %d, usd %d; want %d images of %d, %d, %d", r.PromptTokens, r.MaxOutput, r.UnitMicroUSD, tc.images, high, tc.out, tc.usd)
			}
		})
	}
}
