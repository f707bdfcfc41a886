package builtin

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"unicode/utf8"
)

// The mock's other billed endpoints, billed as OpenAI publishes: gpt-image
// in tokens (the prompt's, and each image's output tokens by size and
// quality, auto billed as the largest, plus 100 per streamed partial
// image), dall-e per image, tts-1 per character, gpt-4o-*-tts the input's
// tokens and its audio's (1,250 tokens a minute of speech at 15
// characters a second, slower at a lower speed), embeddings their input's
// tokens; moderations are free.

// mockImageTokens is gpt-image's output tokens per image, by quality and
// size.
var mockImageTokens = map[string]map[string]int{
	"low":    {"1024x1024": 272, "1024x1536": 408, "1536x1024": 400},
	"medium": {"1024x1024": 1056, "1024x1536": 1584, "1536x1024": 1568},
	"high":   {"1024x1024": 4160, "1024x1536": 6240, "1536x1024": 6208},
}

// mockDallePrices is dall-e's price per image in micro-dollars.
var mockDallePrices = map[string]map[string]int64{
	"dall-e-2":          {"256x256": 16_000, "512x512": 18_000, "1024x1024": 20_000},
	"dall-e-3/standard": {"1024x1024": 40_000, "1024x1792": 80_000, "1792x1024": 80_000},
	"dall-e-3/hd":       {"1024x1024": 80_000, "1024x1792": 120_000, "1792x1024": 120_000},
}

type imagesRequest struct {
	Model         string `json:"model"`
	Prompt        string `json:"prompt"`
	N             *int   `json:"n"`
	Size          string `json:"size"`
	Quality       string `json:"quality"`
	Stream        bool   `json:"stream"`
	PartialImages int    `json:"partial_images"`
}

func (m *openAIMock) images(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req imagesRequest
	if e, ok := decodeRequest(body, &req); !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	m.serveImages(w, req, 0)
}

// serveImages answers and bills an image call; imageInput is what its
// input images bill, in tokens.
func (m *openAIMock) serveImages(w http.ResponseWriter, req imagesRequest, imageInput int) {
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > 10 || req.Prompt == "" {
		writeOpenAIError(w, http.StatusBadRequest, invalid("n must be between 1 and 10, and prompt is required", "n"))
		return
	}
	data := make([]map[string]string, n)
	for i := range data {
		data[i] = map[string]string{"b64_json": base64.StdEncoding.EncodeToString([]byte("image"))}
	}
	resp := map[string]any{"created": m.cfg.Now().Unix(), "data": data}
	if strings.HasPrefix(req.Model, "dall-e") {
		key := req.Model
		if req.Model == "dall-e-3" {
			key += "/" + orDefault(req.Quality, "standard")
		}
		price, ok := mockDallePrices[key][orDefault(req.Size, "1024x1024")]
		if !ok {
			writeOpenAIError(w, http.StatusBadRequest, invalid("size or quality not supported by "+req.Model, "size"))
			return
		}
		m.billed.billUSD(price * int64(n))
		writeJSON(w, http.StatusOK, resp)
		return
	}
	per := 0
	for q, sizes := range mockImageTokens {
		if req.Quality != "" && req.Quality != "auto" && req.Quality != q {
			continue
		}
		for s, t := range sizes {
			if req.Size == "" || req.Size == "auto" || req.Size == s {
				per = max(per, t)
			}
		}
	}
	if per == 0 {
		writeOpenAIError(w, http.StatusBadRequest, invalid("size or quality not supported", "size"))
		return
	}
	if req.Stream {
		per += 100 * req.PartialImages
	}
	text := m.cfg.CountTokens(req.Model, req.Prompt)
	input := text + imageInput
	m.billed.billTokens(input, per*n)
	resp["usage"] = map[string]any{"input_tokens": input, "output_tokens": per * n, "total_tokens": input + per*n,
		"input_tokens_details": map[string]int{"text_tokens": text, "image_tokens": imageInput}}
	writeJSON(w, http.StatusOK, resp)
}

type speechRequest struct {
	Model        string   `json:"model"`
	Input        string   `json:"input"`
	Instructions string   `json:"instructions"`
	Speed        *float64 `json:"speed"`
}

func (m *openAIMock) speech(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req speechRequest
	if e, ok := decodeRequest(body, &req); !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	chars := utf8.RuneCountInString(req.Input)
	speed := 1.0
	if req.Speed != nil {
		speed = *req.Speed
	}
	if chars == 0 || chars > 4096 || speed < 0.25 || speed > 4 {
		writeOpenAIError(w, http.StatusBadRequest, invalid("input must be 1 to 4096 characters, speed 0.25 to 4", "input"))
		return
	}
	switch req.Model {
	case "tts-1":
		m.billed.billUSD((int64(chars)*15_000 + 999) / 1000)
	case "tts-1-hd":
		m.billed.billUSD((int64(chars)*30_000 + 999) / 1000)
	default:
		input := m.cfg.CountTokens(req.Model, req.Input) + m.cfg.CountTokens(req.Model, req.Instructions)
		seconds := float64(chars) / 15 / speed
		m.billed.billTokens(input, int(seconds*1250/60+0.999))
	}
	w.Header().Set("Content-Type", "audio/mpeg")
	w.Write([]byte("ID3 mock audio"))
}

type embeddingsRequest struct {
	Model string `json:"model"`
	Input any    `json:"input"`
}

func (m *openAIMock) embeddings(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req embeddingsRequest
	if e, ok := decodeRequest(body, &req); !ok {
		writeOpenAIError(w, http.StatusBadRequest, e)
		return
	}
	var texts []string
	switch in := req.Input.(type) {
	case string:
		texts = []string{in}
	case []any:
		for _, v := range in {
			texts = append(texts, fmt.Sprint(v))
		}
	}
	input := 0
	for _, s := range texts {
		input += m.cfg.CountTokens(req.Model, s)
	}
	m.billed.billTokens(input, 0)
	data := make([]map[string]any, len(texts))
	for i := range data {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": []float64{0.1, 0.2}}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": req.Model,
		"usage": map[string]int{"prompt_tokens": input, "total_tokens": input}})
}

// moderations are free: answered, billed nothing.
func (m *openAIMock) moderations(w http.ResponseWriter, _ *http.Request, _ []byte) {
	writeJSON(w, http.StatusOK, map[string]any{"id": m.newID("modr"), "model": "omni-moderation-latest",
		"results": []map[string]any{{"flagged": false}}})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// transcriptions bill the audio's seconds (its bytes at 8 kbit/s, the
// mock's reading of a compressed file): whisper-1 $0.006 a minute,
// gpt-4o transcribe models 10 audio tokens a second, the prompt's tokens
// and the transcript's, 3 a second of audio.
func (m *openAIMock) transcriptions(w http.ResponseWriter, r *http.Request, body []byte) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		writeOpenAIError(w, http.StatusBadRequest, invalid("the body must be multipart/form-data", "file"))
		return
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	fields := map[string]string{}
	var fileBytes int64
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeOpenAIError(w, http.StatusBadRequest, invalid("reading the form: "+err.Error(), ""))
			return
		}
		if part.FormName() == "file" {
			fileBytes, _ = io.Copy(io.Discard, part)
			continue
		}
		v, _ := io.ReadAll(part)
		fields[part.FormName()] = string(v)
	}
	if fileBytes == 0 || fields["model"] == "" {
		writeOpenAIError(w, http.StatusBadRequest, invalid("file and model are required", "file"))
		return
	}
	seconds := (fileBytes + 999) / 1000
	if fields["model"] == "whisper-1" {
		m.billed.billUSD(seconds * 100)
		writeJSON(w, http.StatusOK, map[string]any{"text": "mock transcript"})
		return
	}
	input := int(seconds)*10 + m.cfg.CountTokens(fields["model"], fields["prompt"])
	output := min(int(seconds)*3, 2000)
	m.billed.billTokens(input, output)
	writeJSON(w, http.StatusOK, map[string]any{"text": "mock transcript",
		"usage": map[string]any{"type": "tokens", "input_tokens": input, "output_tokens": output, "total_tokens": input + output}})
}

// imageUploads are image edits and variations: gpt-image edits bill the
// prompt, 6,240 tokens an input image or mask (the mock's stand-in for
// the image tokens a high-fidelity input takes) and the outputs as a
// generation does; dall-e-2 bills its price per output image.
func (m *openAIMock) imageUploads(w http.ResponseWriter, r *http.Request, body []byte) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		writeOpenAIError(w, http.StatusBadRequest, invalid("the body must be multipart/form-data", "image"))
		return
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	fields := map[string]string{}
	images := 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeOpenAIError(w, http.StatusBadRequest, invalid("reading the form: "+err.Error(), ""))
			return
		}
		if part.FileName() != "" {
			io.Copy(io.Discard, part)
			images++
			continue
		}
		v, _ := io.ReadAll(part)
		fields[part.FormName()] = string(v)
	}
	req := imagesRequest{Model: fields["model"], Prompt: fields["prompt"], Size: fields["size"], Quality: fields["quality"],
		Stream: fields["stream"] == "true"}
	if v := fields["n"]; v != "" {
		var n int
		fmt.Sscan(v, &n)
		req.N = &n
	}
	if v := fields["partial_images"]; v != "" {
		fmt.Sscan(v, &req.PartialImages)
	}
	if images == 0 || req.Model == "" {
		writeOpenAIError(w, http.StatusBadRequest, invalid("image and model are required", "image"))
		return
	}
	if req.Prompt == "" {
		req.Prompt = "variation" // variations take none
	}
	m.serveImages(w, req, images*6240)
}
