package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
)

// rawClient sends Accept-Encoding as given and decodes nothing: what the
// gateway answers is what it reads.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}

func postWith(t *testing.T, url, body, acceptEncoding string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// usageOf is the total_tokens of the last usage in an answer, JSON or a
// stream's events.
func usageOf(t *testing.T, body []byte) int64 {
	t.Helper()
	var total int64
	for _, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimPrefix(line, []byte("data: "))
		var u struct {
			Usage *struct {
				TotalTokens int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(line, &u) == nil && u.Usage != nil {
			total = u.Usage.TotalTokens
		}
	}
	return total
}

// Whatever a client accepts (the openai and Anthropic SDKs send "gzip,
// deflate", Node's fetch over HTTPS "br, gzip, deflate"), the gateway asks
// the upstream for gzip, reads the answer's usage through it, and answers
// the client uncompressed; the call is settled to its usage.
func TestCompressedAnswersAreRead(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	mock := builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 20})
	g := llmGatewayOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		mock.ServeHTTP(w, r)
	}), 100_000)
	for _, ae := range []string{"gzip, deflate", "br, gzip, deflate", "br", ""} {
		for _, extra := range []string{"", `,"stream":true,"stream_options":{"include_usage":true}`} {
			t.Run(ae+extra, func(t *testing.T) {
				before := g.used(t)
				resp := postWith(t, g.url, strings.Replace(chatBody, "%s", extra, 1), ae)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("got %d, %v", resp.StatusCode, err)
				}
				if ce := resp.Header.Get("Content-Encoding"); ce != "" {
					t.Fatalf("got Content-Encoding %q, want the answer uncompressed", ce)
				}
				usage := usageOf(t, body)
				g.waitSettled(t)
				if got := g.used(t) - before; usage == 0 || got != usage {
					t.Fatalf("charged %d, want the usage %d read through the encoding", got, usage)
				}
			})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range asked {
		if a != "gzip" {
			t.Fatalf("the upstream was asked for %q, want gzip", a)
		}
	}
}

// An upstream that answers in deflate (zlib, as HTTP names it) unasked is
// read too; one in an encoding the gateway cannot read is refused with 502
// and the call charged its reservation, since the provider billed it.
func TestUnaskedEncodings(t *testing.T) {
	answer := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":17,"completion_tokens":3,"total_tokens":20}}`
	t.Run("deflate", func(t *testing.T) {
		g := llmGatewayOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "deflate")
			zw := zlib.NewWriter(w)
			io.WriteString(zw, answer)
			zw.Close()
		}), 100_000)
		resp := postWith(t, g.url, strings.Replace(chatBody, "%s", "", 1), "")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		g.waitSettled(t)
		if string(body) != answer || g.used(t) != 20 {
			t.Fatalf("got %q and %d charged, want the answer decoded and its usage 20", body, g.used(t))
		}
	})
	t.Run("br", func(t *testing.T) {
		g := llmGatewayOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "\x1b\x02\x00compressed")
		}), 100_000)
		resp := postWith(t, g.url, strings.Replace(chatBody, "%s", "", 1), "br")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		g.waitSettled(t)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "encoding") {
			t.Fatalf("got %d %s, want 502 naming the encoding", resp.StatusCode, body)
		}
		if used := g.used(t); used < 100 {
			t.Fatalf("charged %d, want the reservation (its output cap of 100 and the prompt)", used)
		}
	})
}

// A small gzip that decodes past the bound is cut there.
func TestDecodedAnswerIsBounded(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(make([]byte, 10_000))
	zw.Close()
	d := &decodedBody{src: io.NopCloser(&z), open: func(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }, left: 4096}
	n, err := io.Copy(io.Discard, d)
	if !errors.Is(err, errDecodedTooLarge) || n > 4096 {
		t.Fatalf("read %d, %v; want at most 4096 and errDecodedTooLarge", n, err)
	}
}

// A stream labelled text/plain is recognised by what it holds, read for
// its usage and hidden its usage chunk as any stream.
func TestStreamRecognisedByContent(t *testing.T) {
	mock := builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 20})
	g := llmGatewayOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mock.ServeHTTP(&relabel{ResponseWriter: w}, r)
	}), 100_000)
	resp := postWith(t, g.url, strings.Replace(chatBody, "%s", `,"stream":true`, 1), "")
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, data)
		}
	}
	resp.Body.Close()
	g.waitSettled(t)
	for _, e := range events {
		if strings.Contains(e, `"usage":{`) {
			t.Fatalf("a client that did not ask for usage got it: %s", e)
		}
	}
	if used := g.used(t); len(events) < 20 || used <= 20 || used >= 100 {
		t.Fatalf("%d events, charged %d: want the stream's usage (its 20 tokens and prompt), not its reservation", len(events), used)
	}
}

// relabel makes an event stream's Content-Type text/plain.
type relabel struct{ http.ResponseWriter }

func (r *relabel) WriteHeader(status int) {
	if r.Header().Get("Content-Type") == "text/event-stream" {
		r.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *relabel) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }
