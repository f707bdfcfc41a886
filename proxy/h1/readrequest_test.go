package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// requestSeen is what the handler sees of a request's head.
type requestSeen struct {
	Method, RequestURI, Proto, Host string
	Major, Minor                    int
	URL                             string
	URLFields                       any
	Header, Trailer                 http.Header
	ContentLength                   int64
	Close                           bool
	TransferEncoding                []string
}

func seen(r *http.Request) requestSeen {
	u := *r.URL
	return requestSeen{
		Method: r.Method, RequestURI: r.RequestURI, Proto: r.Proto, Host: r.Host,
		Major: r.ProtoMajor, Minor: r.ProtoMinor, URL: r.URL.String(), URLFields: u,
		Header: r.Header, Trailer: r.Trailer, ContentLength: r.ContentLength, Close: r.Close,
		TransferEncoding: r.TransferEncoding,
	}
}

// checkParseAsNetHTTP checks that a head parseRequest reads is one
// http.ReadRequest reads to the same request, and the lean path serves;
// it reports whether parseRequest read it.
func checkParseAsNetHTTP(t testing.TB, wire string) bool {
	t.Helper()
	head := []byte(wire)
	if n := headEnd(head); n > 0 {
		head = head[:n]
	}
	got := parseRequest(head)
	if got == nil {
		return false
	}
	want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		t.Fatalf("%q: parseRequest read it, http.ReadRequest refused it: %v", head, err)
	}
	if !leanRequest(want, head) {
		t.Fatalf("%q: parseRequest read it, the lean path would not serve it", head)
	}
	if g, w := seen(got), seen(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%q:\ngot  %+v\nwant %+v", head, g, w)
	}
	return true
}

// TestParseRequestAsNetHTTP reads heads with parseRequest, and each one it
// reads with http.ReadRequest too; lean says which it reads.
func TestParseRequestAsNetHTTP(t *testing.T) {
	const chat = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n"
	const sdk = "POST /v1/chat/completions?x=1&y=%20 HTTP/1.1\r\nhost: gw.example:443\r\naccept: application/json\r\n" +
		"content-type: application/json\r\nuser-agent: OpenAI/JS 5.1.0\r\nx-stainless-lang: js\r\nauthorization: Bearer sk-x\r\n" +
		"accept-encoding: gzip, deflate\r\nconnection: keep-alive\r\ncontent-length: 120\r\n\r\n"
	for _, c := range []struct {
		name, wire string
		lean       bool
	}{
		{"wrk's GET", "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n", true},
		{"a chat call", chat, true},
		{"an SDK's call, names in lower case", sdk, true},
		{"every method the lean path takes", "DELETE /a HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"OPTIONS", "OPTIONS /a HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"HEAD", "HEAD /a HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"PUT, PATCH", "PATCH /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", true},
		{"escapes in the path", "GET /a%2Fb/%7Ec;p?q=%41#f HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"a raw path", "GET /a%2Fb/c HTTP/1.1\r\nHost: h\r\n\r\n", true},
		{"a bad escape", "GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"repeated fields", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\nAccept: a\r\nACCEPT: b\r\n\r\n", true},
		{"spaces around values", "GET / HTTP/1.1\r\nHost:   h  \r\nX-A:\t 1 \t\r\nX-B:\r\n\r\n", true},
		{"Connection: close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", true},
		{"Connection: Keep-Alive", "GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive\r\n\r\n", true},
		{"Connection: upgrade", "GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n\r\n", false},
		{"two Connection fields", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\nConnection: close\r\n\r\n", false},
		{"no Host", "GET / HTTP/1.1\r\nAccept: a\r\n\r\n", false},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: h\r\nhost: i\r\n\r\n", false},
		{"an empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", true},
		{"a bad Host", "GET / HTTP/1.1\r\nHost: h/i\r\n\r\n", false},
		{"a length at the lean limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 65536\r\n\r\n", true},
		{"a length past it", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 65537\r\n\r\n", false},
		{"two lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", false},
		{"a signed length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\n", false},
		{"chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"Expect", "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", false},
		{"Upgrade", "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n", false},
		{"Pragma", "GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n", false},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: h\r\n\r\n", false},
		{"an absolute target", "GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"an asterisk", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"CONNECT", "CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"a method in lower case", "get / HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"a space in the target", "GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", false},
		{"bare LF", "GET / HTTP/1.1\nHost: h\n\n", false},
		{"one bare LF", "GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n", false},
		{"a folded line", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", false},
		{"a control byte in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n", false},
		{"obs-text in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\xffb\r\n\r\n", true},
		{"a space before a colon", "GET / HTTP/1.1\r\nHost: h\r\nX : y\r\n\r\n", false},
		{"a name not a token", "GET / HTTP/1.1\r\nHost: h\r\nX(y): z\r\n\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := checkParseAsNetHTTP(t, c.wire); got != c.lean {
				t.Errorf("read by parseRequest: got %v, want %v", got, c.lean)
			}
		})
	}
}

// FuzzParseRequestAsNetHTTP reads any head with parseRequest and, when it
// reads one, with http.ReadRequest too.
func FuzzParseRequestAsNetHTTP(f *testing.F) {
	f.Add("GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n")
	f.Add("POST /v1/chat/completions?a=b HTTP/1.1\r\nhost: h\r\ncontent-type: application/json\r\nContent-Length: 12\r\nConnection: close\r\n\r\n")
	f.Add("GET /a%2Fb HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\n\r\n")
	f.Fuzz(func(t *testing.T, wire string) {
		if !strings.Contains(wire, "\r\n\r\n") {
			wire += "\r\n\r\n"
		}
		checkParseAsNetHTTP(t, wire)
	})
}
