package h1

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// parseRequest is http.ReadRequest's reading of head, a whole request head
// through its blank line, for a request the lean path serves (leanRequest),
// when the head is a plain one: every line ended by CRLF and unfolded, one
// of the methods leanRequest takes, a path, HTTP/1.1, one Host, fields
// net/http accepts, no Transfer-Encoding, Pragma, Upgrade or Expect, at
// most one Connection (keep-alive or close) and one plain Content-Length
// up to MaxLeanBody. It returns nil for any other head, which
// http.ReadRequest then reads. The Request has no Body: serveRequest gives
// it one.
//
// net/http spends about a tenth of a proxied GET reading its head: a
// reader per head, each name checked and looked up in a table, each value
// copied, the transfer fields looked up again, and leanRequest's checks
// after it all. Here one pass does all of that.
func parseRequest(head []byte) *http.Request {
	lineEnd := bytes.IndexByte(head, '\n') - 1
	if lineEnd < 0 || head[lineEnd] != '\r' {
		return nil
	}
	method, rest, ok := bytes.Cut(head[:lineEnd], []byte(" "))
	if !ok {
		return nil
	}
	m := leanMethod(method)
	target, proto, ok := bytes.Cut(rest, []byte(" "))
	if m == "" || !ok || string(proto) != "HTTP/1.1" || len(target) == 0 || target[0] != '/' {
		return nil
	}
	s := string(head) // every value is a piece of it
	uri := s[len(method)+1 : len(method)+1+len(target)]
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil
	}
	var (
		buf                     [requestFields]pair // more spill to the heap
		fields                  = buf[:0]
		host                    string
		hosts, connections, cls int
	)
	for at := lineEnd + len(crlf); at < len(head)-len(crlf); {
		end := at + bytes.IndexByte(head[at:], '\n') - 1
		if head[end] != '\r' {
			return nil
		}
		k, v, ok := headerLine(s, head, at, end)
		if !ok {
			return nil
		}
		switch k {
		case "Host": // the request's, not a field (as http.ReadRequest has it)
			host, hosts = v, hosts+1
			at = end + len(crlf)
			continue
		case "Connection":
			connections++
		case "Content-Length":
			cls++
		case "Transfer-Encoding", "Pragma", "Upgrade", "Expect":
			return nil
		}
		fields = append(fields, pair{k, v})
		at = end + len(crlf)
	}
	if hosts != 1 || connections > 1 || cls > 1 {
		return nil
	}
	pr := new(parsedRequest)
	values := pr.values[:]
	if len(fields) > len(values) {
		values = make([]string, len(fields))
	}
	header := fieldsHeader(fields, values)
	if !httpguts.ValidHostHeader(host) {
		return nil
	}
	var n int64
	if cls == 1 {
		if n, ok = contentLength(header["Content-Length"]); !ok || n > MaxLeanBody {
			return nil
		}
	}
	closing := false
	if c := header["Connection"]; c != nil {
		if closing = strings.EqualFold(c[0], "close"); !closing && !strings.EqualFold(c[0], "keep-alive") {
			return nil
		}
	}
	pr.req = http.Request{
		Method: m, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, ContentLength: n, Close: closing, Host: host, RequestURI: uri,
	}
	return &pr.req
}

// parsedRequest is a request parseRequest reads, in one allocation with
// its field values for a head of up to requestFields fields (an SDK's
// call has a dozen or so).
type parsedRequest struct {
	req    http.Request
	values [requestFields]string
}

const requestFields = 16

// leanMethod is method when it is one leanRequest takes, as a constant;
// "" for any other.
func leanMethod(method []byte) string {
	switch string(method) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	}
	return ""
}
