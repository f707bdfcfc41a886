package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"

	"golang.org/x/net/http/httpguts"

	"github.com/ratelimit-gateway/gateway/internal/httpfield"
)

// readResponse reads a response's head from br as http.ReadResponse does,
// and returns the same Response. A plain head (see parseHead) that is whole
// in br's buffer is parsed here, in one pass and a few allocations: net/http
// spends about a sixth of a proxied request reading an upstream's six-field
// answer, most of it canonicalizing names that are already canonical and
// copying each value into a string of its own. Anything else, and any head
// net/http would refuse, is left unread for http.ReadResponse, which reads
// and judges it in its own words.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodHead {
		if head, lines := peekHead(br); head != nil {
			if lr := parseHead(head, lines, req); lr != nil {
				if n := lr.res.ContentLength; n > 0 {
					lr.body = lengthBody{br: br, left: n}
					lr.res.Body = &lr.body
				}
				br.Discard(len(head))
				return &lr.res, nil
			}
		}
	}
	return http.ReadResponse(br, req)
}

// peekHead returns the head at the start of br's buffer, through its blank
// line, and how many lines it has before that one, reading more as it
// arrives; nil when the head does not fit in the buffer, when a line ends in
// a bare LF, or when the connection fails first (http.ReadResponse then
// reads what there is, and meets the same failure).
func peekHead(br *bufio.Reader) (head []byte, lines int) {
	at := 0 // the start of the first line not yet seen whole
	for want := 1; ; want = br.Buffered() + 1 {
		if want > br.Size() {
			return nil, 0
		}
		if _, err := br.Peek(want); err != nil {
			return nil, 0
		}
		buf, _ := br.Peek(br.Buffered())
		for {
			i := bytes.IndexByte(buf[at:], '\n')
			if i < 0 {
				break
			}
			if i == 0 || buf[at+i-1] != '\r' {
				return nil, 0
			}
			if i == 1 {
				return buf[:at+2], lines
			}
			lines++
			at += i + 1
		}
	}
}

var statusHTTP = []byte("HTTP/1.1 ")

// parseHead is http.ReadResponse's reading of head, a whole head of lines
// lines (the status line among them) through its blank line, each line
// ended by CRLF, when the head is a plain one: HTTP/1.1, a status of 200–599
// other than 204 and 304, unfolded fields net/http accepts, one plain
// Content-Length, and no Transfer-Encoding or Pragma. It returns nil for any
// other head. The Response's body is left for the caller (NoBody when the
// length is 0).
func parseHead(head []byte, lines int, req *http.Request) *leanResponse {
	if !bytes.HasPrefix(head, statusHTTP) {
		return nil
	}
	s := string(head) // every value is a piece of it
	lineEnd := bytes.IndexByte(head, '\n') - 1
	code, ok := statusCode(head[len(statusHTTP):lineEnd])
	if !ok {
		return nil
	}
	var buf [leanFields]pair // more spill to the heap
	fields := buf[:0]
	for at := lineEnd + len(crlf); at < len(head)-len(crlf); {
		end := at + bytes.IndexByte(head[at:], '\n') - 1
		k, v, ok := headerLine(s, head, at, end)
		if !ok {
			return nil
		}
		switch k {
		case "Transfer-Encoding", "Pragma":
			return nil
		}
		fields = append(fields, pair{k, v})
		at = end + len(crlf)
	}
	lr := new(leanResponse)
	values := lr.values[:]
	if len(fields) > len(values) {
		values = make([]string, len(fields))
	}
	header := fieldsHeader(fields, values)
	n, ok := contentLength(header["Content-Length"])
	if !ok {
		return nil
	}
	closing := false
	if c := header["Connection"]; c != nil && httpguts.HeaderValuesContainsToken(c, "close") {
		closing = true
		delete(header, "Connection")
	}
	lr.res = http.Response{
		Status: s[len(statusHTTP):lineEnd], StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, Body: http.NoBody, ContentLength: n, Close: closing, Request: req,
	}
	return lr
}

// leanResponse is a response parseHead reads, in one allocation with its
// body's framing and its field values for a head of up to leanFields
// fields.
type leanResponse struct {
	res    http.Response
	body   lengthBody
	values [leanFields]string
}

const leanFields = 10

// pair is a header field as it came: its name canonical, one value.
type pair struct{ k, v string }

// fieldsHeader is fields as a Header, its values in the order they came,
// each value's slice a piece of values (as long as fields).
func fieldsHeader(fields []pair, values []string) http.Header {
	h := make(http.Header, len(fields))
	for i, f := range fields {
		values[i] = f.v
		h[f.k] = values[i : i+1 : i+1]
	}
	if len(h) == len(fields) {
		return h
	}
	clear(h) // a name came twice: its values are gathered
	for i, f := range fields {
		if vv := h[f.k]; vv != nil {
			h[f.k] = append(vv, f.v)
		} else {
			h[f.k] = values[i : i+1 : i+1]
		}
	}
	return h
}

var crlf = []byte("\r\n")

// statusCode reads a status line's code and reason: three digits, then
// nothing or a space and a reason of visible characters and spaces.
func statusCode(line []byte) (int, bool) {
	if len(line) < 3 || len(line) > 3 && line[3] != ' ' {
		return 0, false
	}
	code := 0
	for _, d := range line[:3] {
		if d < '0' || d > '9' {
			return 0, false
		}
		code = code*10 + int(d-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return 0, false
	}
	for _, c := range line[3:] {
		if c < ' ' || c == 0x7f {
			return 0, false
		}
	}
	return code, true
}

// headerLine reads the header line head[at:end] (s is head as a string): the
// canonical name, and the value without the spaces and tabs around it. A
// line net/http would fold, refuse or keep uncanonicalized is not one.
func headerLine(s string, head []byte, at, end int) (k, v string, ok bool) {
	colon := bytes.IndexByte(head[at:end], ':')
	if colon <= 0 {
		return "", "", false
	}
	colon += at
	if k, ok = commonName(head[at:colon]); !ok {
		if k, ok = fieldName(s[at:colon]); !ok {
			return "", "", false
		}
	}
	from, to := colon+1, end
	for _, c := range head[from:to] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return "", "", false
		}
	}
	for from < to && (head[from] == ' ' || head[from] == '\t') {
		from++
	}
	for to > from && (head[to-1] == ' ' || head[to-1] == '\t') {
		to--
	}
	return k, s[from:to], true
}

// commonName is name as one of the fields clients and upstreams send most,
// spelt canonically: a constant, checked and canonical already.
func commonName(name []byte) (string, bool) {
	switch string(name) {
	case "Host":
		return "Host", true
	case "User-Agent":
		return "User-Agent", true
	case "Accept":
		return "Accept", true
	case "Accept-Encoding":
		return "Accept-Encoding", true
	case "Authorization":
		return "Authorization", true
	case "X-Api-Key":
		return "X-Api-Key", true
	case "Server":
		return "Server", true
	case "Date":
		return "Date", true
	case "Content-Type":
		return "Content-Type", true
	case "Content-Length":
		return "Content-Length", true
	case "Connection":
		return "Connection", true
	case "Keep-Alive":
		return "Keep-Alive", true
	case "Cache-Control":
		return "Cache-Control", true
	case "Vary":
		return "Vary", true
	case "Etag":
		return "Etag", true
	case "Last-Modified":
		return "Last-Modified", true
	case "Set-Cookie":
		return "Set-Cookie", true
	case "X-Request-Id":
		return "X-Request-Id", true
	case "Access-Control-Allow-Origin":
		return "Access-Control-Allow-Origin", true
	case "Strict-Transport-Security":
		return "Strict-Transport-Security", true
	case "X-Content-Type-Options":
		return "X-Content-Type-Options", true
	}
	return "", false
}

// fieldName is name canonical, as net/textproto makes it; false when a byte
// of it is not a token's.
func fieldName(name string) (string, bool) {
	switch {
	case httpfield.CanonicalName(name):
		return name, true
	case !httpfield.ValidName(name):
		return "", false
	}
	return textproto.CanonicalMIMEHeaderKey(name), true
}

// contentLength is the value of one Content-Length field when it is plain
// digits (net/http takes more: spaces around, repeats of one value, which
// are left to it).
func contentLength(vv []string) (int64, bool) {
	if len(vv) != 1 || len(vv[0]) == 0 || len(vv[0]) > 18 {
		return 0, false
	}
	var n int64
	for _, d := range []byte(vv[0]) {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

// lengthBody is a body framed by its Content-Length, read as net/http reads
// one: io.EOF with its last byte, io.ErrUnexpectedEOF when the connection
// ends before it.
type lengthBody struct {
	br   *bufio.Reader
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }
