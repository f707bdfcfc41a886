package h1

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/ratelimit-gateway/gateway/internal/httpfield"
)

// response is a lean request's http.ResponseWriter. It writes what
// net/http's server writes, byte for byte but for the chunks' sizes,
// built the same way: the handler's writes go through a 2 KiB buffer (w)
// to a chunk writer that sends the header block with the first of them,
// so that a body that ends within 2 KiB is sent with its length; the
// block is the handler's header as it was at WriteHeader, fields sorted,
// then the fields the server adds (Date, Content-Length, Content-Type,
// Connection, Transfer-Encoding).
type response struct {
	c      *serverConn
	req    *http.Request
	body   *requestBody // nil without one
	header http.Header
	w      *bufio.Writer // the connection's, reset for this response

	status                                  int
	wroteHeader, sent, chunked, handlerDone bool
	done, closeAfter, fullDuplex            bool
	contentLength, written                  int64
	// Of the header at WriteHeader.
	haveCL, haveType, haveDate, hasCE, hasTE bool
	te                                       string
	connFirst                                string // its first Connection value
	connClose, protocolSwitch                bool
	// connAt and connEnd are where its Connection fields are in c.hdr (the
	// rendered block), dropped if the connection is to close.
	connAt, connEnd int
	trailers        []string // declared in Trailer
	hasTrailers     bool
	setUsed         bool // SetFields set fields in c.set
}

// A connection keeps the header block's buffer, and the fields it sorts,
// up to these sizes between answers.
const (
	maxKeptHeaderBlock = 4 << 10
	maxKeptFields      = 64
)

// bufferBeforeChunking is net/http's: a body that ends within it is sent
// with a Content-Length.
const bufferBeforeChunking = 2048

// errResponseDone is what a write after the handler returned gets.
var errResponseDone = errors.New("h1: response written after its handler returned")

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.done {
		return
	}
	if w.wroteHeader {
		w.c.s.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.wroteHeader = true
	w.status = code
	h := w.header
	if cl := first(h["Content-Length"]); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.c.s.logf("http: invalid Content-Length of %q", cl)
			h.Del("Content-Length")
		}
	}
	_, w.haveCL = h["Content-Length"]
	_, w.haveType = h["Content-Type"]
	_, w.haveDate = h["Date"]
	w.hasCE = first(h["Content-Encoding"]) != ""
	w.te = first(h["Transfer-Encoding"])
	w.hasTE = w.te != ""
	w.connFirst = first(h["Connection"])
	w.connClose = hasToken(w.connFirst, "close")
	w.protocolSwitch = code == http.StatusSwitchingProtocols && first(h["Upgrade"]) != "" && httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade")
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			w.hasTrailers = true
			break
		}
	}
	for _, v := range h["Trailer"] {
		w.hasTrailers = true
		for f := range strings.SplitSeq(v, ",") {
			if f = trimSpace(f); f != "" {
				if k := http.CanonicalHeaderKey(f); httpguts.ValidTrailerHeader(k) {
					w.trailers = append(w.trailers, k)
				}
			}
		}
	}
	// Which of the handler's framing fields net/http drops, all known
	// now: a length beside a transfer coding, a transfer coding where no
	// body goes or a length or a chunked coding of its own does.
	dropCL := w.contentLength != -1 && w.hasTE && w.te != "identity"
	if dropCL {
		w.c.s.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", w.te, w.contentLength)
		w.contentLength = -1
	}
	isHead := w.req.Method == http.MethodHead
	dropTE := isHead || !bodyAllowed(code) || w.contentLength != -1 || w.te == "identity" || w.te == "chunked"
	w.c.hdr = w.appendBlock(w.c.hdr[:0], func(k string) bool {
		switch k {
		case "Content-Length":
			return bodyAllowed(code) && !dropCL
		case "Transfer-Encoding":
			return !dropTE
		case "Content-Type":
			return code != http.StatusNotModified
		}
		return !strings.HasPrefix(k, http.TrailerPrefix)
	})
}

// appendBlock appends the header's fields that keep accepts, sorted by
// name, as net/http writes them (names checked, line breaks in values
// made spaces, values trimmed), noting where the Connection fields are.
// The fields SetFields set go in their places by name (keep accepts them
// all: they are none of the names it is asked about), but under a name
// the map holds too, which was set after them.
func (w *response) appendBlock(dst []byte, keep func(string) bool) []byte {
	fields := w.c.fields[:0]
	for k, vv := range w.header {
		if keep(k) && httpfield.ValidName(k) {
			fields = append(fields, field{k, vv})
		}
	}
	sortFields(fields)
	var set []setField
	if w.setUsed {
		set = w.c.set
	}
	w.connAt, w.connEnd = -1, -1
	for _, f := range fields {
		for len(set) > 0 && set[0].name <= f.name {
			if set[0].name < f.name {
				dst = w.appendSet(dst, set[0])
			}
			set = set[1:]
		}
		if f.name == "Connection" {
			w.connAt = len(dst)
		}
		for _, v := range f.values {
			dst = appendField(dst, f.name, v)
		}
		if f.name == "Connection" {
			w.connEnd = len(dst)
		}
	}
	for _, f := range set {
		dst = w.appendSet(dst, f)
	}
	clear(fields)
	w.c.fields = fields[:0]
	return dst
}

// appendSet appends a field SetFields set, as appendField would: by
// appendField itself for a value it may have to mend.
func (w *response) appendSet(dst []byte, f setField) []byte {
	v := w.c.setValues[f.start:f.end]
	if f.breaks || len(v) == 0 || isSpace(v[0]) || isSpace(v[len(v)-1]) {
		return appendField(dst, f.name, string(v))
	}
	dst = append(dst, f.name...)
	dst = append(dst, ':', ' ')
	dst = append(dst, v...)
	return append(dst, '\r', '\n')
}

// sortFields sorts fields by name. A response has a dozen or so: an
// insertion sort, which slices.SortFunc would also pick at that size,
// without a call of a comparison function for each step.
func sortFields(fields []field) {
	if len(fields) > 24 {
		slices.SortFunc(fields, func(a, b field) int { return strings.Compare(a.name, b.name) })
		return
	}
	for i := 1; i < len(fields); i++ {
		f := fields[i]
		j := i
		for ; j > 0 && f.name < fields[j-1].name; j-- {
			fields[j] = fields[j-1]
		}
		fields[j] = f
	}
}

// field is a header field's name and values, for sorting.
type field struct {
	name   string
	values []string
}

// appendField appends "k: v" and a line end. As net/http, line breaks in
// v become spaces and v is trimmed of spaces, tabs and line breaks; the
// trim comes first here, which gives the same.
func appendField(dst []byte, k, v string) []byte {
	dst = append(dst, k...)
	dst = append(dst, ':', ' ')
	if plainValue(v) {
		dst = append(dst, v...)
		return append(dst, '\r', '\n')
	}
	v = trimSpace(v)
	if strings.ContainsAny(v, "\r\n") {
		for i := 0; i < len(v); i++ {
			b := v[i]
			if b == '\r' || b == '\n' {
				b = ' '
			}
			dst = append(dst, b)
		}
	} else {
		dst = append(dst, v...)
	}
	return append(dst, '\r', '\n')
}

// first is a field's first value, "" for none: Header.Get of a canonical
// name without canonicalizing it again, on every answer.
func first(vv []string) string {
	if len(vv) == 0 {
		return ""
	}
	return vv[0]
}

// plainValue reports whether v needs neither trimming nor line breaks
// made spaces, as nearly every value: where Trim and ContainsAny would each
// build a set of bytes first, a byte loop for a short value and two
// vectorized scans for a longer one.
func plainValue(v string) bool {
	if v == "" || isSpace(v[0]) || isSpace(v[len(v)-1]) {
		return v == ""
	}
	if len(v) >= 16 {
		return strings.IndexByte(v, '\n') < 0 && strings.IndexByte(v, '\r') < 0
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			return false
		}
	}
	return true
}

// isSpace is what trimSpace trims.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// writeInformational writes a 1xx answer at once: the handler's header as
// it is, less Content-Length and Transfer-Encoding.
func (w *response) writeInformational(code int) {
	bw := w.c.bw
	bw.Write(appendStatusLine(w.c.line[:0], code))
	w.c.hdr = w.appendBlock(w.c.hdr[:0], func(k string) bool {
		return k != "Content-Length" && k != "Transfer-Encoding"
	})
	bw.Write(w.c.hdr)
	bw.WriteString("\r\n")
	bw.Flush()
}

func (w *response) Write(p []byte) (int, error) {
	if err := w.willWrite(len(p)); err != nil || len(p) == 0 {
		return 0, err
	}
	return w.w.Write(p)
}

func (w *response) WriteString(s string) (int, error) {
	if err := w.willWrite(len(s)); err != nil || len(s) == 0 {
		return 0, err
	}
	return w.w.WriteString(s)
}

// willWrite does what net/http does before a body write of n bytes: the
// header goes (200) if it has not, and a write where no body may go, or
// past the declared length, is an error.
func (w *response) willWrite(n int) error {
	if w.done {
		return errResponseDone
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if n == 0 {
		return nil
	}
	if !bodyAllowed(w.status) {
		return http.ErrBodyNotAllowed
	}
	w.written += int64(n)
	if w.contentLength != -1 && w.written > w.contentLength {
		return http.ErrContentLength
	}
	return nil
}

// FlushError sends the header and what is buffered to the client.
func (w *response) FlushError() error {
	if w.done {
		return errResponseDone
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if err := w.w.Flush(); err != nil {
		return err
	}
	if !w.sent {
		w.send(nil)
	}
	return w.c.bw.Flush()
}

// Flush is FlushError for http.Flusher.
func (w *response) Flush() { w.FlushError() }

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.nc.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// EnableFullDuplex serves http.ResponseController: the request body stays
// readable once the response has started (net/http otherwise reads what
// is left of it before it sends the header).
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// chunkWriter is what the 2 KiB buffer flushes to: it sends the header
// block with the first bytes, then frames them when chunked. HEAD answers
// eat them.
type chunkWriter struct{ w *response }

func (cw *chunkWriter) Write(p []byte) (int, error) {
	w := cw.w
	if !w.sent {
		w.send(p)
	}
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	bw := w.c.bw
	if w.chunked {
		var size [20]byte
		bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		w.c.nc.Close()
	}
	return n, err
}

// send writes the header block, with the fields the server adds decided
// as net/http decides them; p is the start of the body (nil when none is
// buffered).
func (w *response) send(p []byte) {
	w.sent = true
	c := w.c
	code := w.status
	keepAlives := !c.s.inShutdown.Load()
	isHead := w.req.Method == http.MethodHead
	ex := c.extra[:0]
	if !w.haveDate {
		ex = append(ex, "Date: "...)
		ex = appendDate(ex)
		ex = append(ex, '\r', '\n')
	}
	if w.handlerDone && !w.hasTrailers && !w.hasTE && bodyAllowed(code) && !w.haveCL && (!isHead || len(p) > 0) {
		w.contentLength = int64(len(p))
		ex = append(ex, "Content-Length: "...)
		ex = strconv.AppendInt(ex, w.contentLength, 10)
		ex = append(ex, '\r', '\n')
	}
	if w.connFirst == "close" || !keepAlives {
		w.closeAfter = true
	}
	// What the handler left of the body is read now, before the answer
	// goes, so that the client is not blocked writing it.
	if w.body != nil && !w.closeAfter && !w.fullDuplex && !w.body.discardForReply() {
		w.closeAfter = true
	}
	if bodyAllowed(code) && !w.hasCE && !w.haveType && !w.hasTE && len(p) > 0 {
		ex = append(ex, "Content-Type: "...)
		ex = append(ex, http.DetectContentType(p)...)
		ex = append(ex, '\r', '\n')
	}
	var te string
	switch {
	case isHead || !bodyAllowed(code) || code == http.StatusNoContent:
	case w.contentLength != -1:
	case w.te == "identity":
		w.closeAfter = true
	default:
		w.chunked = true
		te = "chunked"
	}
	dropConn := w.closeAfter && (!keepAlives || !w.connClose) && !w.protocolSwitch
	if dropConn {
		ex = append(ex, "Connection: close\r\n"...)
	}
	if te != "" {
		ex = append(ex, "Transfer-Encoding: chunked\r\n"...)
	}
	bw := c.bw
	bw.Write(appendStatusLine(c.line[:0], code))
	if dropConn && w.connAt >= 0 {
		bw.Write(c.hdr[:w.connAt])
		bw.Write(c.hdr[w.connEnd:])
	} else {
		bw.Write(c.hdr)
	}
	bw.Write(ex)
	bw.WriteString("\r\n")
}

// finish ends the response once the handler has returned, and reports
// whether the connection may serve another request.
func (w *response) finish() bool {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.w.Flush()
	if !w.sent {
		w.send(nil)
	}
	if w.chunked {
		bw := w.c.bw
		bw.WriteString("0\r\n")
		if t := w.finalTrailers(); t != nil {
			t.Write(bw)
		}
		bw.WriteString("\r\n")
	}
	err := w.c.bw.Flush()
	w.done = true
	// A large header block (an upstream may send up to 1 MiB of fields)
	// is not kept for the connection's next answers.
	if cap(w.c.hdr) > maxKeptHeaderBlock {
		w.c.hdr = nil
	}
	if cap(w.c.fields) > maxKeptFields {
		w.c.fields = nil
	}
	if cap(w.c.setValues) > maxKeptHeaderBlock || cap(w.c.set) > maxKeptFields {
		w.c.set, w.c.setValues = nil, nil
	}
	if err != nil || w.closeAfter {
		return false
	}
	// A body shorter than it said: the client would take the next
	// answer's bytes for the rest of it.
	return w.req.Method == http.MethodHead || w.contentLength == -1 || !bodyAllowed(w.status) || w.contentLength == w.written
}

// finalTrailers is net/http's: the fields named with http.TrailerPrefix,
// then those declared in Trailer, as the handler left them.
func (w *response) finalTrailers() http.Header {
	var t http.Header
	for k, vv := range w.header {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.header[k] {
			t.Add(k, v)
		}
	}
	return t
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

func appendStatusLine(dst []byte, code int) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	if text := http.StatusText(code); text != "" {
		dst = strconv.AppendInt(dst, int64(code), 10)
		dst = append(dst, ' ')
		dst = append(dst, text...)
	} else {
		dst = fmt.Appendf(dst, "%03d status code %d", code, code)
	}
	return append(dst, '\r', '\n')
}

// The Date field changes once a second: it is formatted once a second.
var dateCache atomic.Pointer[cachedDate]

type cachedDate struct {
	sec  int64
	text []byte
}

func appendDate(dst []byte) []byte {
	now := time.Now()
	d := dateCache.Load()
	if d == nil || d.sec != now.Unix() {
		d = &cachedDate{sec: now.Unix(), text: now.UTC().AppendFormat(nil, http.TimeFormat)}
		dateCache.Store(d)
	}
	return append(dst, d.text...)
}

// hasToken is net/http's: whether v holds token (ASCII,
// case-insensitively) between spaces, commas or tabs.
func hasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	boundary := func(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !boundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !boundary(v[end]) {
			continue
		}
		if strings.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

// trimSpace is net/textproto.TrimString: spaces, tabs and line ends off
// both ends.
func trimSpace(s string) string {
	return strings.Trim(s, " \t\r\n")
}
