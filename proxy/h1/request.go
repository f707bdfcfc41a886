package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/httpfield"
)

// writeRequest writes req into bw as req.Write(bw) does: the same bytes,
// flushed at the same points (not at the end), the same errors and side
// effects (the body read and closed, the trace's WroteRequest called).
// Only the rest of a body larger than bw's buffer may reach a writer that
// is an io.ReaderFrom (a TCP connection) in writes of other sizes.
//
// req.Write spends about 11,700 instructions on a proxied GET of six
// fields (fmt for the request line and Host, a pooled sorter for the
// fields, the transferWriter); this, 4,800, building the head in bw's
// own buffer (BenchmarkWriteRequest under callgrind). What it does not
// write the same way for certain goes to req.Write: a CONNECT, a
// transfer coding or trailer, a body of unknown length (net/http probes
// it or sends it chunked), a Host that net/http would rewrite or drop
// (non-ASCII, a zone, an odd byte), a request URI with a control byte or
// a space (net/http's error), a trace that watches the fields, a head
// larger than bw's free space.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	trace := httptrace.ContextClientTrace(req.Context())
	if trace != nil && (trace.WroteHeaderField != nil || trace.WroteHeaders != nil || trace.Wait100Continue != nil) {
		return req.Write(bw)
	}
	// The head goes in bw's free space, which is not bw's until written:
	// a request found unusual halfway leaves nothing behind. A head that
	// does not fit goes to req.Write too: it writes its head in pieces,
	// and bw would flush between them where one Write does not.
	head, cl, ok := appendHead(bw.AvailableBuffer(), req)
	if !ok || len(head) > bw.Available() {
		return req.Write(bw)
	}
	err := writeLean(bw, req, head, cl)
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	return err
}

// appendHead appends req's head as net/http writes it, with the body's
// length; false for a request the lean writer leaves to req.Write.
func appendHead(dst []byte, req *http.Request) (_ []byte, cl int64, ok bool) {
	u := req.URL
	if u == nil || req.Method == http.MethodConnect || len(req.TransferEncoding) > 0 || req.Trailer != nil {
		return dst, 0, false
	}
	if cl, ok = bodyLength(req); !ok {
		return dst, 0, false
	}
	host := req.Host
	if host == "" {
		host = u.Host
	}
	if !plainHost(host) {
		return dst, 0, false
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	dst = append(dst, method...)
	dst = append(dst, ' ')
	if dst, ok = appendRequestURI(dst, u); !ok {
		return dst, 0, false
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, host...)
	dst = append(dst, '\r', '\n')
	dst = appendOwnFields(dst, req, method, cl)
	dst = appendRequestFields(dst, req.Header)
	return append(dst, '\r', '\n'), cl, true
}

// appendOwnFields appends the fields net/http writes of its own, in its
// order: User-Agent, Connection: close, Content-Length.
func appendOwnFields(dst []byte, req *http.Request, method string, cl int64) []byte {
	h := req.Header
	// net/http's default unless the header has the key, even empty.
	ua := "Go-http-client/1.1"
	if vv, set := h["User-Agent"]; set {
		ua = first(vv)
	}
	if ua != "" {
		dst = appendField(dst, "User-Agent", ua)
	}
	if req.Close && !hasToken(first(h["Connection"]), "close") {
		dst = append(dst, "Connection: close\r\n"...)
	}
	// Many servers want a length for these methods, even 0 (net/http's
	// shouldSendContentLength).
	if cl > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, cl, 10)
		dst = append(dst, '\r', '\n')
	}
	return dst
}

// bodyLength is the Content-Length net/http sends for req's body: false
// for one it would probe for a first byte or send chunked, or refuse.
func bodyLength(req *http.Request) (int64, bool) {
	switch req.Body {
	case nil:
		return 0, req.ContentLength == 0
	case http.NoBody:
		return 0, true
	}
	return req.ContentLength, req.ContentLength > 0
}

// plainHost reports whether net/http sends host as it is: ASCII (no
// Punycode), valid in a Host field, no IPv6 zone to remove.
func plainHost(host string) bool {
	for i := 0; i < len(host); i++ {
		if !plainHostByte[host[i]] {
			return false
		}
	}
	return true
}

var plainHostByte = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.:-[]_") {
		t[c] = true
	}
	return t
}()

// appendRequestURI appends u.RequestURI() without building it; false when
// it holds a control byte (net/http's error) or a space.
func appendRequestURI(dst []byte, u *url.URL) ([]byte, bool) {
	start := len(dst)
	if u.Opaque == "" {
		p := u.EscapedPath()
		if p == "" {
			p = "/"
		}
		dst = append(dst, p...)
	} else {
		if strings.HasPrefix(u.Opaque, "//") {
			dst = append(dst, u.Scheme...)
			dst = append(dst, ':')
		}
		dst = append(dst, u.Opaque...)
	}
	if u.ForceQuery || u.RawQuery != "" {
		dst = append(dst, '?')
		dst = append(dst, u.RawQuery...)
	}
	for _, c := range dst[start:] {
		if c <= ' ' || c == 0x7f {
			return dst, false
		}
	}
	return dst, true
}

// appendRequestFields appends h's fields as net/http's Header.writeSubset
// does for a request: sorted by name, the framing fields and User-Agent
// left out (by their exact names, as net/http), invalid names dropped.
func appendRequestFields(dst []byte, h http.Header) []byte {
	var kept [32]field
	fields := kept[:0]
	for k, vv := range h {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		if len(vv) > 0 && httpfield.ValidName(k) {
			fields = append(fields, field{k, vv})
		}
	}
	sortFields(fields)
	for _, f := range fields {
		for _, v := range f.values {
			dst = appendField(dst, f.name, v)
		}
	}
	return dst
}

// writeLean writes the head and the body of cl bytes, and closes the body,
// as Request.write and transferWriter.writeBody do. The body goes through
// bw.ReadFrom as net/http's does, so that bw flushes where it would.
func writeLean(bw *bufio.Writer, req *http.Request, head []byte, cl int64) error {
	if _, err := bw.Write(head); err != nil {
		closeBody(req)
		return err
	}
	rc := req.Body
	if rc == nil {
		return nil
	}
	r, wrapped := unwrapNopCloser(rc)
	if !wrapped {
		r = rc
	}
	// net/http sends the head in a write of its own before a body that
	// might block.
	if cl != 0 && !inMemory(r) {
		if err := bw.Flush(); err != nil {
			rc.Close()
			return err
		}
	}
	n, err := copyBody(bw, r, cl)
	if err != nil {
		rc.Close()
		if err != io.EOF {
			err = bodyError{err}
		}
		return err
	}
	if err := rc.Close(); err != nil {
		return err
	}
	if n != cl {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", cl, n)
	}
	return nil
}

// copyBody writes cl bytes of r and reads the rest of it, counting it in
// n, as net/http does. A reader in memory that holds just cl bytes needs
// no limit, nor a read of the rest.
func copyBody(bw *bufio.Writer, r io.Reader, cl int64) (n int64, err error) {
	switch m := r.(type) {
	case *bytes.Reader:
		if int64(m.Len()) == cl {
			return bw.ReadFrom(m)
		}
	case *strings.Reader:
		if int64(m.Len()) == cl {
			return bw.ReadFrom(m)
		}
	}
	if n, err = bw.ReadFrom(&io.LimitedReader{R: r, N: cl}); err != nil {
		return n, err
	}
	rest, err := io.Copy(io.Discard, r)
	return n + rest, err
}

// bodyError is an error of the body's copy, read or write: net/http
// returns it in a type of its own (requestBodyReadError) that errors.Is
// does not see through, and so does this, with the same text.
type bodyError struct{ error }

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// io.NopCloser's two types, which net/http looks through for the reader
// it copies from and for one in memory.
var (
	nopCloserType         = reflect.TypeOf(io.NopCloser(nil))
	nopCloserWriterToType = reflect.TypeOf(io.NopCloser(strings.NewReader("")))
)

func unwrapNopCloser(r io.Reader) (io.Reader, bool) {
	switch reflect.TypeOf(r) {
	case nopCloserType, nopCloserWriterToType:
		return reflect.ValueOf(r).Field(0).Interface().(io.Reader), true
	}
	return nil, false
}

// inMemory is net/http's isKnownInMemoryReader (but for its Transport's
// own wrapper, which never reaches this one).
func inMemory(r io.Reader) bool {
	for {
		switch r.(type) {
		case *bytes.Reader, *bytes.Buffer, *strings.Reader:
			return true
		}
		var ok bool
		if r, ok = unwrapNopCloser(r); !ok {
			return false
		}
	}
}
