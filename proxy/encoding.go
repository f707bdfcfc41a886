package proxy

import (
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// An llm call's answer is read as it passes: its usage, its stream's
// events, and the chunks the gateway hides or adds. Compressed bytes can be
// neither read nor edited, so on an llm call the gateway asks the upstream
// for gzip alone (whatever the client accepts), decodes it, and answers the
// client uncompressed. An answer in any other encoding cannot be read: it
// is refused with 502 and the call is charged its reservation, since the
// provider may have billed it.

// upstreamAcceptEncoding is what an llm call accepts from the upstream:
// one value shared by every call's header (nothing writes into a header's
// values), which spares each call an allocation.
var upstreamAcceptEncoding = []string{"gzip"}

// maxDecodedBody bounds an llm answer's decoded bytes: a small gzip can
// decode to gigabytes. Past it the answer is cut (and the call charged its
// reservation, as any cut answer).
const maxDecodedBody = 256 << 20

var (
	// errUnreadableEncoding is an llm answer in an encoding the gateway
	// did not ask for.
	errUnreadableEncoding = errors.New("proxy: the upstream answered in an encoding the gateway did not ask for")
	// errDecodedTooLarge is an llm answer that decodes past maxDecodedBody.
	errDecodedTooLarge = errors.New("proxy: the upstream's answer decodes past its bound")
)

// decodeAnswer makes resp's body its decoded bytes, bounded by
// maxDecodedBody, and drops the headers that described the encoded ones.
// It returns errUnreadableEncoding for an encoding it cannot decode.
func decodeAnswer(resp *http.Response) error {
	ce := resp.Header["Content-Encoding"]
	if len(ce) == 0 {
		return nil
	}
	var open func(io.Reader) (io.ReadCloser, error)
	switch enc := strings.ToLower(strings.TrimSpace(strings.Join(ce, ","))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		open = func(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }
	case "deflate": // zlib, as HTTP names it
		open = zlib.NewReader
	default:
		return fmt.Errorf("%w: %q", errUnreadableEncoding, enc)
	}
	delete(resp.Header, "Content-Encoding")
	if open == nil {
		return nil
	}
	delete(resp.Header, "Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	resp.Body = &decodedBody{src: resp.Body, open: open, left: maxDecodedBody}
	return nil
}

// decodedBody is an answer's body decoded. The decoder is made at the first
// read, not before: its header may come with the first event of a stream,
// and the client's headers need not wait for it.
type decodedBody struct {
	src  io.ReadCloser
	open func(io.Reader) (io.ReadCloser, error)
	dec  io.ReadCloser
	left int64 // decoded bytes still allowed
	err  error
}

func (d *decodedBody) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if d.dec == nil {
		dec, err := d.open(d.src)
		if err != nil {
			d.err = fmt.Errorf("decoding the upstream's answer: %w", err)
			return 0, d.err
		}
		d.dec = dec
	}
	n, err := d.dec.Read(p)
	if d.left -= int64(n); d.left < 0 {
		d.err = errDecodedTooLarge
		return 0, d.err
	}
	if err != nil && err != io.EOF {
		err = fmt.Errorf("decoding the upstream's answer: %w", err)
	}
	return n, err
}

func (d *decodedBody) Close() error {
	if d.dec != nil {
		d.dec.Close()
	}
	return d.src.Close()
}
