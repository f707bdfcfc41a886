package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Image generation bills two ways. gpt-image models bill tokens: the
// prompt, and per image the output tokens its size and quality take (a
// table OpenAI publishes), plus 100 per partial image streamed; the
// answer's usage says what was billed. dall-e models bill per image, by
// size and quality, and say nothing of it: the call is charged its price,
// and a token policy counts each image as the largest gpt-image output.

// imageOutputTokens is gpt-image's output tokens per image, by quality and
// size ("auto" for either is the largest).
var imageOutputTokens = map[string]map[string]int64{
	"low":    {"1024x1024": 272, "1024x1536": 408, "1536x1024": 400},
	"medium": {"1024x1024": 1056, "1024x1536": 1584, "1536x1024": 1568},
	"high":   {"1024x1024": 4160, "1024x1536": 6240, "1536x1024": 6208},
}

// MaxImageOutputTokens is the most output tokens one gpt-image image
// bills (high quality, 1024x1536): a dall-e image counts as much in a
// token policy.
const MaxImageOutputTokens = 6240

// partialImageTokens is what each streamed partial image adds.
const partialImageTokens = 100

// dallePrices is dall-e's price per image in micro-dollars, by model,
// quality ("" for dall-e-2, which has one) and size.
var dallePrices = map[string]map[string]map[string]int64{
	"dall-e-2": {"": {"256x256": 16_000, "512x512": 18_000, "1024x1024": 20_000}},
	"dall-e-3": {
		"standard": {"1024x1024": 40_000, "1024x1792": 80_000, "1792x1024": 80_000},
		"hd":       {"1024x1024": 80_000, "1024x1792": 120_000, "1792x1024": 120_000},
	},
}

type wireImages struct {
	Model         string  `json:"model"`
	Prompt        *string `json:"prompt"`
	N             *int64  `json:"n"`
	Size          *string `json:"size"`
	Quality       *string `json:"quality"`
	Stream        *bool   `json:"stream"`
	PartialImages *int64  `json:"partial_images"`
}

// maxImages is the most images one call may ask for, as OpenAI accepts.
const maxImages = 10

func parseImages(body []byte, rename Rename, models Models, pace Pace) (Request, error) {
	var w wireImages
	if err := decodeObject(body, &w); err != nil {
		return Request{}, invalid(ImageGenerations, err)
	}
	var err error
	if w.Model, err = rename.model(w.Model); err != nil {
		return Request{}, err
	}
	r := Request{Model: w.Model, Family: models.For(w.Model), Choices: 1}
	if w.Prompt == nil {
		return Request{}, invalid(ImageGenerations, fmt.Errorf("prompt is required"))
	}
	if w.N != nil {
		if *w.N < 1 || *w.N > maxImages {
			return Request{}, invalid(ImageGenerations, fmt.Errorf("n must be between 1 and %d, got %d", maxImages, *w.N))
		}
		r.Choices = *w.N
	}
	size, quality := deref(w.Size, "auto"), deref(w.Quality, "auto")
	switch {
	case w.Model == "":
		// OpenAI picks dall-e-2 or a gpt-image model by the other fields:
		// the bound would be a guess.
		return Request{}, invalid(ImageGenerations, fmt.Errorf("model is required on this route: name the image model"))
	case strings.HasPrefix(w.Model, "dall-e-"):
		return dalleRequest(r, w.Model, size, quality)
	case !strings.HasPrefix(w.Model, "gpt-image-"):
		return Request{}, invalid(ImageGenerations, fmt.Errorf("model %q is no image model the gateway can bound (gpt-image-*, dall-e-2, dall-e-3)", w.Model))
	}
	per, err := imageTokens(size, quality)
	if err != nil {
		return Request{}, invalid(ImageGenerations, err)
	}
	if w.PartialImages != nil {
		if *w.PartialImages < 0 || *w.PartialImages > 3 {
			return Request{}, invalid(ImageGenerations, fmt.Errorf("partial_images must be between 0 and 3, got %d", *w.PartialImages))
		}
		if w.Stream != nil && *w.Stream {
			per += *w.PartialImages * partialImageTokens
		}
	}
	c := counter{model: w.Model, family: r.Family, pace: pace}
	c.text(*w.Prompt)
	r.PromptTokens, r.MaxOutput, r.HasCap = c.n, per*r.Choices, true
	return r, nil
}

// imageTokens is one gpt-image image's output tokens at size and quality.
func imageTokens(size, quality string) (int64, error) {
	var most int64
	for q, sizes := range imageOutputTokens {
		if quality != "auto" && q != quality {
			continue
		}
		for s, n := range sizes {
			if size == "auto" || s == size {
				most = max(most, n)
			}
		}
	}
	if most == 0 {
		return 0, fmt.Errorf("size %q at quality %q is not one gpt-image takes (1024x1024, 1024x1536, 1536x1024, auto; low, medium, high, auto)", size, quality)
	}
	return most, nil
}

// dalleRequest bounds a dall-e call: n images at their price, each a
// MaxImageOutputTokens in a token policy; no usage comes back.
func dalleRequest(r Request, model, size, quality string) (Request, error) {
	byQuality, ok := dallePrices[model]
	if !ok {
		return Request{}, invalid(ImageGenerations, fmt.Errorf("model %q is no dall-e model the gateway knows (dall-e-2, dall-e-3)", model))
	}
	if model == "dall-e-3" && r.Choices != 1 {
		return Request{}, invalid(ImageGenerations, fmt.Errorf("dall-e-3 takes n: 1 only"))
	}
	var price int64
	for q, sizes := range byQuality {
		if !(quality == "auto" || q == quality || q == "" && (quality == "standard")) {
			continue
		}
		for s, p := range sizes {
			if size == "auto" || s == size {
				price = max(price, p)
			}
		}
	}
	if price == 0 {
		return Request{}, invalid(ImageGenerations, fmt.Errorf("size %q at quality %q is not one %s takes", size, quality, model))
	}
	r.UnitMicroUSD = MulSat(price, r.Choices)
	r.MaxOutput, r.HasCap, r.NoUsage = MulSat(MaxImageOutputTokens, r.Choices), true, true
	return r, nil
}

// decodeObject decodes a JSON object body into v, refusing what is not one.
func decodeObject(body []byte, v any) error {
	if err := requireObject(body); err != nil {
		return err
	}
	if !validJSON(body) {
		return fmt.Errorf("not valid JSON")
	}
	return json.Unmarshal(body, v)
}

func deref(s *string, def string) string {
	if s == nil || *s == "" {
		return def
	}
	return *s
}

// MaxImageUpload is the largest form an image edit or variation may send,
// the gateway's own bound: its images are held to be counted.
const MaxImageUpload = 32 << 20

// ParseImageUpload reads an image edit or variation form (kind ImageEdits
// or ImageVariations): gpt-image edits are bounded as generations are, plus each input
// image (and mask) at the model family's high-detail bound; dall-e-2 edits
// and variations at their price per image. Errors wrap ErrInvalidRequest.
func ParseImageUpload(kind Kind, contentType string, body []byte, models Models, pace Pace) (Request, error) {
	return parseImageUpload(kind, contentType, body, nil, models, pace)
}

func parseImageUpload(kind Kind, contentType string, body []byte, rename Rename, models Models, pace Pace) (Request, error) {
	variation := kind == ImageVariations
	fields, files, err := readForm(contentType, body)
	if err != nil {
		return Request{}, invalid(ImageEdits, err)
	}
	for _, f := range files {
		if f.field != "image" && f.field != "image[]" && f.field != "mask" {
			return Request{}, invalid(ImageEdits, fmt.Errorf("the form's file %q is none an image call takes (image, image[], mask)", f.field))
		}
	}
	if len(files) == 0 {
		return Request{}, invalid(ImageEdits, errors.New("image is required"))
	}
	model, err := rename.model(fields["model"])
	if err != nil {
		return Request{}, err
	}
	r := Request{Model: model, Family: models.For(model), Choices: 1}
	if v, ok := fields["n"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > maxImages {
			return Request{}, invalid(ImageEdits, fmt.Errorf("n must be between 1 and %d, got %q", maxImages, v))
		}
		r.Choices = n
	}
	size, quality := orAuto(fields["size"]), orAuto(fields["quality"])
	switch {
	case model == "":
		return Request{}, invalid(ImageEdits, errors.New("model is required on this route: name the image model"))
	case model == "dall-e-2":
		if quality == "auto" {
			quality = "standard"
		}
		return dalleRequest(r, model, size, quality)
	case variation || !strings.HasPrefix(model, "gpt-image-"):
		return Request{}, invalid(ImageEdits, fmt.Errorf("model %q is no image model the gateway can bound here (gpt-image-* edits, dall-e-2)", model))
	}
	per, err := imageTokens(size, quality)
	if err != nil {
		return Request{}, invalid(ImageEdits, err)
	}
	if v, ok := fields["partial_images"]; ok && fields["stream"] == "true" {
		p, err := strconv.ParseInt(v, 10, 64)
		if err != nil || p < 0 || p > 3 {
			return Request{}, invalid(ImageEdits, fmt.Errorf("partial_images must be between 0 and 3, got %q", v))
		}
		per += p * partialImageTokens
	}
	c := counter{model: model, family: r.Family, pace: pace}
	c.text(fields["prompt"])
	c.add(MulSat(int64(len(files)), r.Family.ImageHigh))
	r.PromptTokens, r.MaxOutput, r.HasCap = c.n, per*r.Choices, true
	return r, nil
}

func orAuto(s string) string {
	if s == "" {
		return "auto"
	}
	return s
}
