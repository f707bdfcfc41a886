package builtin

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
)

// A provider renders every value it is sent into what its model reads, so
// the mock bills what a request carries outside the fields it reads as its
// prompt too: every string of any other member, its key included, by
// count (the member's key too). A field a provider adds tomorrow is
// billed by the mock today.

// chatRead and responsesRead are the top-level fields of a request the
// mock reads (as its prompt, its cap or its options); itemRead those of a
// message or an input item.
var (
	chatRead = map[string]bool{"model": true, "messages": true, "max_tokens": true, "max_completion_tokens": true,
		"n": true, "stream": true, "stream_options": true, "tools": true, "tool_choice": true, "functions": true,
		"function_call": true, "prediction": true, "temperature": true, "modalities": true, "audio": true}
	responsesRead = map[string]bool{"model": true, "input": true, "instructions": true, "max_output_tokens": true,
		"stream": true, "tools": true, "tool_choice": true, "temperature": true}
	itemRead = map[string]bool{"role": true, "content": true, "type": true}
)

// hiddenTokens bills the strings of body's members that read does not
// name, and of its items' (the array at items) members that itemRead does
// not name.
func (m *openAIMock) hiddenTokens(model string, body []byte, read map[string]bool, items string) int {
	var top map[string]any
	if json.Unmarshal(body, &top) != nil {
		return 0
	}
	n := 0
	count := func(s string) { n += m.cfg.CountTokens(model, s) }
	for k, v := range top {
		if !read[k] {
			count(k)
			eachString(v, count)
		}
	}
	list, _ := top[items].([]any)
	for _, it := range list {
		item, _ := it.(map[string]any)
		for k, v := range item {
			if !itemRead[k] {
				count(k)
				eachString(v, count)
			}
		}
	}
	return n
}

// eachString calls f with every string value in v.
func eachString(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case []any:
		for _, e := range x {
			eachString(e, f)
		}
	case map[string]any:
		for _, e := range x {
			eachString(e, f)
		}
	}
}

// predictionTokens bills a chat request's prediction as output, as OpenAI
// bills the tokens of a prediction its answer did not use: the mock's
// answer uses none.
func (m *openAIMock) predictionTokens(model string, body []byte) int {
	var req struct {
		Prediction *struct {
			Content any `json:"content"`
		} `json:"prediction"`
	}
	if json.Unmarshal(body, &req) != nil || req.Prediction == nil {
		return 0
	}
	n := 0
	switch c := req.Prediction.Content.(type) {
	case string:
		n = m.cfg.CountTokens(model, c)
	case []any:
		for _, p := range c {
			if part, ok := p.(map[string]any); ok {
				if t, ok := part["text"].(string); ok {
					n += m.cfg.CountTokens(model, t)
				}
			}
		}
	}
	return n
}

// gzipWriter answers in gzip, flushing the compressor with each flush of
// a stream: what a provider does for a client that accepts gzip.
type gzipWriter struct {
	http.ResponseWriter
	gz          *gzip.Writer
	wroteHeader bool
}

// acceptsGzip reports whether r's Accept-Encoding names gzip (at a weight
// above 0).
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, e := range strings.Split(v, ",") {
			name, q, _ := strings.Cut(strings.TrimSpace(e), ";")
			if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
				return true
			}
		}
	}
	return false
}

func (g *gzipWriter) WriteHeader(status int) {
	if !g.wroteHeader {
		g.wroteHeader = true
		g.Header().Del("Content-Length")
		g.Header().Set("Content-Encoding", "gzip")
		g.Header().Add("Vary", "Accept-Encoding")
	}
	g.ResponseWriter.WriteHeader(status)
}

func (g *gzipWriter) Write(b []byte) (int, error) {
	if !g.wroteHeader {
		g.WriteHeader(http.StatusOK)
	}
	return g.gz.Write(b)
}

func (g *gzipWriter) FlushError() error {
	if err := g.gz.Flush(); err != nil {
		return err
	}
	return http.NewResponseController(g.ResponseWriter).Flush()
}

func (g *gzipWriter) close() {
	if g.wroteHeader {
		g.gz.Close()
	}
}
