package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/ratelimit-gateway/gateway/policies"
)

// heldBody is a request body the gateway has read into memory (to count an
// llm call's tokens, to fingerprint an idempotent request) and forwards
// from there. A later step that needs the bytes takes them from it rather
// than reading the body again.
type heldBody struct {
	*bytes.Reader
	b []byte
}

func (heldBody) Close() error { return nil }

// readBody returns r's body, read whole and bounded by the route's
// max_body_bytes (413 beyond, with the message to answer), and r's body
// held in memory. A body already held is returned as it is.
func readBody(w http.ResponseWriter, r *http.Request, route *policies.Route) (*http.Request, []byte, int, string) {
	if hb, ok := r.Body.(heldBody); ok {
		return r, hb.b, 0, ""
	}
	body, err := io.ReadAll(http.MaxBytesReader(rawWriter(w), r.Body, max(route.MaxBodyBytes, 1)))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return r, nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds this route's limit of %d bytes", tooLarge.Limit)
		}
		return r, nil, http.StatusBadRequest, "the request body could not be read"
	}
	return withBody(r, body), body, 0, ""
}

// withBody returns a copy of r that carries body, with the ContentLength
// that fits it. The copy is shallow: it shares r's header, which the
// gateway does not change (ReverseProxy sends a clone of it, and rewrite
// drops a Content-Length the client sent: the request's writer takes the
// length from ContentLength).
func withBody(r *http.Request, body []byte) *http.Request {
	out := new(http.Request)
	*out = *r
	out.Body = heldBody{Reader: bytes.NewReader(body), b: body}
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	return out
}
