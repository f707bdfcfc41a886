package builtin

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"image"
	_ "image/gif" // image.DecodeConfig reads the formats the providers take
	_ "image/jpeg"
	_ "image/png"
	"math"
	"strings"
	"sync/atomic"
)

// MockBill is what an OpenAIMock has billed since it was made: every token
// of every completion it accepted, counted when it accepted the request
// and for the whole completion, as a provider that finishes a generation
// its client left would bill it.
type MockBill struct {
	Calls     int64
	Input     int64 // prompt tokens, non-text parts included
	Output    int64 // generated tokens of every choice, reasoning included
	Reasoning int64 // the part of Output spent thinking
	// MicroUSD is what calls billed per unit (a dall-e image, a tts-1
	// character) cost, in micro-dollars; their tokens are none.
	MicroUSD int64
}

// Total is Input + Output.
func (b MockBill) Total() int64 { return b.Input + b.Output }

// ledger counts what the mock billed; safe for concurrent use.
type ledger struct{ calls, input, output, reasoning, microUSD atomic.Int64 }

// billTokens bills a call of input and output tokens.
func (l *ledger) billTokens(input, output int) {
	l.calls.Add(1)
	l.input.Add(int64(input))
	l.output.Add(int64(output))
}

// billUSD bills a call priced per unit.
func (l *ledger) billUSD(microUSD int64) {
	l.calls.Add(1)
	l.microUSD.Add(microUSD)
}

func (l *ledger) bill(c completion) {
	l.calls.Add(1)
	l.input.Add(int64(c.prompt))
	l.output.Add(int64(c.choices * c.tokens()))
	l.reasoning.Add(int64(c.choices * c.reasoning))
}

func (l *ledger) read() MockBill {
	return MockBill{Calls: l.calls.Load(), Input: l.input.Load(), Output: l.output.Load(), Reasoning: l.reasoning.Load(), MicroUSD: l.microUSD.Load()}
}

// Image tokens as OpenAI publishes them. Tile models scale an image to fit
// 2048×2048, then its shortest side down to 768 px, and bill base + tile
// per 512-px square; at low detail the base alone. Patch models bill
// 32-px patches (at most 1536, the image scaled down to fit) times a
// multiplier, whatever the detail.
type imagePricing struct {
	prefix     string
	base, tile int     // tile models
	patchMult  float64 // patch models, when > 0
}

var imagePrices = []imagePricing{
	{prefix: "gpt-4o-mini", base: 2833, tile: 5667},
	{prefix: "gpt-4o", base: 85, tile: 170},
	{prefix: "chatgpt-4o", base: 85, tile: 170},
	{prefix: "gpt-4.1", base: 85, tile: 170},
	{prefix: "gpt-4-turbo", base: 85, tile: 170},
	{prefix: "gpt-4.1-mini", patchMult: 1.62},
	{prefix: "gpt-4.1-nano", patchMult: 2.46},
	{prefix: "gpt-5-mini", patchMult: 1.62},
	{prefix: "gpt-5-nano", patchMult: 2.46},
	{prefix: "o4-mini", patchMult: 1.72},
	{prefix: "gpt-5", base: 70, tile: 140},
	{prefix: "o1", base: 75, tile: 150},
	{prefix: "o3", base: 75, tile: 150},
}

// URLImageSize is the size the mock bills an image it is given by URL (it
// fetches nothing): the one that costs a tile model most (8 tiles).
var URLImageSize = [2]int{768, 2048}

func pricingFor(model string) imagePricing {
	best := imagePricing{base: 85, tile: 170}
	for _, p := range imagePrices {
		if strings.HasPrefix(model, p.prefix) && len(p.prefix) > len(best.prefix) {
			best = p
		}
	}
	return best
}

// imageTokens bills one image of w×h pixels.
func imageTokens(model string, w, h int, low bool) int {
	p := pricingFor(model)
	if p.patchMult > 0 {
		patches := float64(ceilDiv(w, 32) * ceilDiv(h, 32))
		if patches > 1536 {
			scale := math.Sqrt(1536 * 32 * 32 / float64(w*h))
			patches = math.Min(float64(int(float64(w)*scale/32)*int(float64(h)*scale/32)), 1536)
		}
		return int(math.Ceil(patches * p.patchMult))
	}
	if low {
		return p.base
	}
	fw, fh := float64(w), float64(h)
	if s := 2048 / math.Max(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	if s := 768 / math.Min(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	tiles := ceilDiv(int(math.Ceil(fw)), 512) * ceilDiv(int(math.Ceil(fh)), 512)
	return p.base + p.tile*tiles
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// decodeData decodes a data: URL's base64 payload, or a bare base64 string.
func decodeData(s string) []byte {
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		_, payload, found := strings.Cut(rest, ",")
		if !found {
			return nil
		}
		s = payload
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil
	}
	return b
}

// imageSize is an inline image's size, or URLImageSize for one by URL (or
// one the mock cannot read).
func imageSize(url string) (int, int) {
	if data := decodeData(url); data != nil {
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(data)); err == nil && cfg.Width > 0 && cfg.Height > 0 {
			return cfg.Width, cfg.Height
		}
	}
	return URLImageSize[0], URLImageSize[1]
}

// audioTokens bills an input_audio part 10 tokens a second: a WAV file's
// duration from its header, any other format at 8 kbit/s (1,000 bytes a
// second, less than any codec the providers take).
func audioTokens(data string) int {
	b := decodeData(data)
	byteRate := 1000
	if len(b) >= 44 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WAVE" {
		// A header claiming fewer bytes a second than any codec is not
		// believed.
		byteRate = max(int(binary.LittleEndian.Uint32(b[28:32])), 1000)
	}
	return ceilDiv(len(b)*10, byteRate)
}

// FileTokensByReference is what the mock bills a file it is given by id or
// URL (it reads no store).
const FileTokensByReference = 1000

// fileTokens bills a file part: an inline PDF its text (a token per four
// bytes) and an image of each page at high detail; a file by reference
// FileTokensByReference.
func fileTokens(model string, data string) int {
	b := decodeData(data)
	if len(b) == 0 {
		return FileTokensByReference
	}
	pages := max(bytes.Count(b, []byte("/Type /Page"))-bytes.Count(b, []byte("/Type /Pages")), 1)
	w, h := URLImageSize[0], URLImageSize[1]
	return ceilDiv(len(b), 4) + pages*imageTokens(model, w, h, false)
}

// partTokens bills one content part; text goes through count.
func partTokens(model string, raw json.RawMessage, count func(string) int) int {
	var p struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Detail   string          `json:"detail"`
		ImageURL json.RawMessage `json:"image_url"`
		Audio    *struct {
			Data string `json:"data"`
		} `json:"input_audio"`
		File *struct {
			FileData string `json:"file_data"`
		} `json:"file"`
		FileData string `json:"file_data"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return 0
	}
	switch p.Type {
	case "image_url", "input_image":
		var url string
		if json.Unmarshal(p.ImageURL, &url) != nil {
			var obj struct{ URL, Detail string }
			json.Unmarshal(p.ImageURL, &obj)
			url = obj.URL
			if obj.Detail != "" {
				p.Detail = obj.Detail
			}
		}
		w, h := imageSize(url)
		return imageTokens(model, w, h, p.Detail == "low")
	case "input_audio":
		if p.Audio != nil {
			return audioTokens(p.Audio.Data)
		}
		return 0
	case "file":
		if p.File != nil {
			return fileTokens(model, p.File.FileData)
		}
		return FileTokensByReference
	case "input_file":
		return fileTokens(model, p.FileData)
	}
	return count(p.Text)
}
