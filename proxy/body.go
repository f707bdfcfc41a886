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
	bytes.Reader
	b []byte
}

func (*heldBody) Close() error { return nil }

// readBody returns r's body, read whole and bounded by the route's
// max_body_bytes (413 beyond, with the message to answer), and r's body
// held in memory. A body already held is returned as it is.
func readBody(w http.ResponseWriter, r *http.Request, route *policies.Route) (*http.Request, []byte, int, string) {
	return readBodyUpTo(w, r, route.MaxBodyBytes)
}

// readBodyUpTo is readBody with a limit of its own (an endpoint's).
func readBodyUpTo(w http.ResponseWriter, r *http.Request, limit int64) (*http.Request, []byte, int, string) {
	if hb, ok := r.Body.(*heldBody); ok {
		return r, hb.b, 0, ""
	}
	body, err := readAllBounded(w, r, max(limit, 1))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return r, nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds this route's limit of %d bytes", tooLarge.Limit)
		}
		return r, nil, http.StatusBadRequest, "the request body could not be read"
	}
	return withBody(r, body), body, 0, ""
}

// readAllBounded reads r's body whole, at most limit bytes (past them a
// *http.MaxBytesError). A body that declares its length within the limit
// and presizeMax is read into one buffer of that length and a byte
// (io.ReadAll would grow one from 512 bytes, a copy at each step), the
// byte to see its end.
func readAllBounded(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	n := r.ContentLength
	if n <= 0 || n > limit || n > presizeMax {
		return io.ReadAll(http.MaxBytesReader(rawWriter(w), r.Body, limit))
	}
	buf := make([]byte, n+1)
	got := 0
	var err error
	for got < len(buf) && err == nil {
		var k int
		k, err = r.Body.Read(buf[got:])
		got += k
	}
	switch {
	case err == io.EOF:
		return buf[:got], nil // as io.ReadAll, a body shorter than declared too
	case err != nil:
		return nil, err
	}
	// More than declared (a server's body never is): read on as io.ReadAll
	// would have, through the same bound.
	rest := struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	return io.ReadAll(http.MaxBytesReader(rawWriter(w), rest, limit))
}

// presizeMax bounds the buffer allocated for a body's declared length
// before its bytes arrive: past it the buffer grows as they do, so a client
// that declares a large body and sends nothing holds little.
const presizeMax = 1 << 20

// withBody returns a copy of r that carries body, with the ContentLength
// that fits it. The copy is shallow: it shares r's header, which the
// gateway does not change (ReverseProxy sends a clone of it, and rewrite
// drops a Content-Length the client sent: the request's writer takes the
// length from ContentLength).
func withBody(r *http.Request, body []byte) *http.Request {
	out := new(http.Request)
	*out = *r
	hb := &heldBody{b: body} // one allocation, its reader in it
	hb.Reset(body)
	out.Body = hb
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	return out
}
