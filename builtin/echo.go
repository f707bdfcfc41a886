// Package builtin holds the gateway's built-in upstreams: small handlers that
// cmd/gateway serves on loopback so that the default configuration proxies to
// something real with no other process running.
package builtin

import (
	"encoding/json"
	"io"
	"net/http"
	"time"
	"unicode/utf8"
)

// MaxEchoBody is how much of a request body Echo reads and returns. The rest
// is left unread (the server discards it), so a large upload cannot make the
// echo buffer it.
const MaxEchoBody = 64 << 10

// MaxEchoDelay bounds the wait an X-Echo-Delay header asks for.
const MaxEchoDelay = 30 * time.Second

// EchoResponse is the JSON document Echo answers with.
type EchoResponse struct {
	Method     string `json:"method"`
	URI        string `json:"uri"` // the request target as received
	Path       string `json:"path"`
	RawQuery   string `json:"raw_query"`
	Proto      string `json:"proto"`
	Host       string `json:"host"`
	RemoteAddr string `json:"remote_addr"`
	// Headers as received; the canonical names are the keys.
	Headers http.Header `json:"headers"`
	// ContentLength is the declared length; -1 when unknown (chunked).
	ContentLength int64 `json:"content_length"`
	// Body is the first MaxEchoBody bytes of the body when they are valid
	// UTF-8; otherwise BodyBase64 carries them.
	Body          string `json:"body"`
	BodyBase64    []byte `json:"body_base64,omitempty"`
	BodyTruncated bool   `json:"body_truncated"`
}

// Echo returns a handler that answers every request with 200 and the request
// as JSON (see EchoResponse). It is the default upstream, so a newcomer sees a
// working proxy, and the headers the gateway adds, without another process.
// A request with "X-Echo-Delay: 3s" is answered that much later (at most
// MaxEchoDelay, sooner if the client leaves): a slow upstream to try
// timeouts, in-flight limits and idempotency keys against. The handler is
// safe for concurrent use.
func Echo() http.Handler { return http.HandlerFunc(echo) }

func echo(w http.ResponseWriter, r *http.Request) {
	if d, err := time.ParseDuration(r.Header.Get("X-Echo-Delay")); err == nil && d > 0 {
		t := time.NewTimer(min(d, MaxEchoDelay))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxEchoBody+1))
	if err != nil {
		// The client went away or the body was malformed; there is nobody
		// sensible to answer in detail.
		http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp := EchoResponse{
		Method:        r.Method,
		URI:           r.RequestURI,
		Path:          r.URL.Path,
		RawQuery:      r.URL.RawQuery,
		Proto:         r.Proto,
		Host:          r.Host,
		RemoteAddr:    r.RemoteAddr,
		Headers:       r.Header,
		ContentLength: r.ContentLength,
	}
	if len(body) > MaxEchoBody {
		body, resp.BodyTruncated = body[:MaxEchoBody], true
	}
	if text, ok := validText(body, resp.BodyTruncated); ok {
		resp.Body = text
	} else {
		resp.BodyBase64 = body
	}
	out, err := json.MarshalIndent(resp, "", "  ")
	if err != nil {
		http.Error(w, "encoding echo: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(out, '\n'))
}

// validText returns body as a string when it is UTF-8. A truncated body may end
// inside a multi-byte character; that partial character is dropped rather than
// turning a text body into base64.
func validText(body []byte, truncated bool) (string, bool) {
	if utf8.Valid(body) {
		return string(body), true
	}
	if truncated {
		for cut := 1; cut < utf8.UTFMax && cut <= len(body); cut++ {
			if head := body[:len(body)-cut]; utf8.Valid(head) {
				return string(head), true
			}
		}
	}
	return "", false
}
