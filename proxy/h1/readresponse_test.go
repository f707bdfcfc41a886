package h1

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// readResult is what a client of a response sees of it: its fields, its
// body and how the body ended, and what is left on the connection after.
type readResult struct {
	Err                   string
	Status                string
	Code, Major, Minor    int
	Proto                 string
	Header, Trailer       http.Header
	ContentLength         int64
	Close, NoBody         bool
	TransferEncoding      []string
	Body, Rest            string
	BodyErr, TrailerAfter string
}

// chunkReader hands out b at most n bytes a read, as a connection does when
// an answer arrives in pieces.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

func readWith(read func(*bufio.Reader, *http.Request) (*http.Response, error), wire, method string, chunk int) readResult {
	br := bufio.NewReaderSize(&chunkReader{b: []byte(wire), n: chunk}, bufferSize)
	res, err := read(br, &http.Request{Method: method})
	if err != nil {
		return readResult{Err: err.Error()}
	}
	r := readResult{
		Status: res.Status, Code: res.StatusCode, Major: res.ProtoMajor, Minor: res.ProtoMinor, Proto: res.Proto,
		Header: res.Header, Trailer: res.Trailer, ContentLength: res.ContentLength, Close: res.Close,
		NoBody: res.Body == http.NoBody, TransferEncoding: res.TransferEncoding,
	}
	body, err := io.ReadAll(res.Body)
	r.Body = string(body)
	if err != nil {
		r.BodyErr = err.Error()
	}
	r.TrailerAfter = fmt.Sprint(res.Trailer)
	rest, _ := io.ReadAll(br)
	r.Rest = string(rest)
	return r
}

// leanRead reports whether readResponse reads wire's head itself.
func leanRead(wire, method string) bool {
	if method == http.MethodHead {
		return false
	}
	br := bufio.NewReaderSize(strings.NewReader(wire), bufferSize)
	head, lines := peekHead(br)
	return head != nil && parseHead(head, lines, &http.Request{Method: method}) != nil
}

func checkReadAsNetHTTP(t testing.TB, wire, method string) {
	t.Helper()
	for _, chunk := range []int{1 << 20, 1, 7} {
		got := readWith(readResponse, wire, method, chunk)
		want := readWith(http.ReadResponse, wire, method, chunk)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %q in reads of %d bytes:\ngot  %+v\nwant %+v", method, wire, chunk, got, want)
		}
	}
}

// TestReadResponseAsNetHTTP reads each answer with readResponse and with
// http.ReadResponse, whole and as it arrives in pieces, and compares all a
// client sees; lean says which path reads it.
func TestReadResponseAsNetHTTP(t *testing.T) {
	const nginx = "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sun, 06 Dec 2026 16:00:00 GMT\r\n" +
		"Content-Type: text/plain\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\nok\n"
	for _, c := range []struct {
		name, method, wire string
		lean               bool
	}{
		{"nginx", "GET", nginx, true},
		{"nginx, then another answer", "GET", nginx + nginx, true},
		{"a POST's answer", "POST", strings.Replace(nginx, "ok\n", "{}\n", 1), true},
		{"to a HEAD", "HEAD", nginx, false},
		{"empty body", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
		{"no reason", "GET", "HTTP/1.1 404\r\nContent-Length: 2\r\n\r\nno", true},
		{"a long reason with obs-text", "GET", "HTTP/1.1 503 Service \xffUnavailable now\r\nContent-Length: 1\r\n\r\nx", true},
		{"lower-case names", "GET", "HTTP/1.1 200 OK\r\ncontent-type: a/b\r\ncontent-length: 1\r\nx-request-id: 7\r\n\r\nx", true},
		{"odd case names", "GET", "HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 1\r\nX-RateLimit-Remaining: 9\r\n\r\nx", true},
		{"repeated fields", "GET", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nContent-Length: 1\r\nSet-Cookie: b=2\r\nset-cookie: c=3\r\n\r\nx", true},
		{"spaces and tabs around values", "GET", "HTTP/1.1 200 OK\r\nA:  \t one two \t \r\nB:\r\nC:\t\r\nContent-Length:   2  \r\n\r\nab", true},
		{"value with a colon", "GET", "HTTP/1.1 200 OK\r\nLink: <http://x:1/>; rel=next\r\nContent-Length: 1\r\n\r\nx", true},
		{"Connection: close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", true},
		{"Connection: Keep-Alive, CLOSE", "GET", "HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 1\r\n\r\nx", true},
		{"Trailer without chunking", "GET", "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nContent-Length: 1\r\n\r\nx", true},
		{"body cut short", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true},
		{"head cut short", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n", false},
		{"nothing", "GET", "", false},
		{"leading zeros", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0003\r\n\r\nabcd", true},
		{"a huge length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\nab", true},
		{"a length past int64", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nab", false},
		{"a signed length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc", false},
		{"two equal lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", false},
		{"two lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", false},
		{"empty length", "GET", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\nabc", false},
		{"no length: read to the end", "GET", "HTTP/1.1 200 OK\r\nContent-Type: a/b\r\n\r\nall of it", false},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\n", false},
		{"chunked and a length", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"gzip transfer coding", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", false},
		{"Pragma", "GET", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx", false},
		{"204", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n", false},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n", false},
		{"100 then 200", "GET", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"HTTP/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"HTTP/2 in a status line", "GET", "HTTP/2 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"status 600", "GET", "HTTP/1.1 600 Odd\r\nContent-Length: 1\r\n\r\nx", false},
		{"status of two digits", "GET", "HTTP/1.1 20 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"status glued to its reason", "GET", "HTTP/1.1 200OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"two spaces before the status", "GET", "HTTP/1.1  200 OK\r\nContent-Length: 1\r\n\r\nx", false},
		{"a control byte in the reason", "GET", "HTTP/1.1 200 O\x01K\r\nContent-Length: 1\r\n\r\nx", false},
		{"bare LF line ends", "GET", "HTTP/1.1 200 OK\nContent-Length: 1\n\nx", false},
		{"one bare LF", "GET", "HTTP/1.1 200 OK\r\nA: b\nContent-Length: 1\r\n\r\nx", false},
		{"a CR in a value", "GET", "HTTP/1.1 200 OK\r\nA: b\rc\r\nContent-Length: 1\r\n\r\nx", false},
		{"a NUL in a value", "GET", "HTTP/1.1 200 OK\r\nA: b\x00c\r\nContent-Length: 1\r\n\r\nx", false},
		{"a folded line", "GET", "HTTP/1.1 200 OK\r\nA: b\r\n c\r\nContent-Length: 1\r\n\r\nx", false},
		{"a folded first line", "GET", "HTTP/1.1 200 OK\r\n A: b\r\nContent-Length: 1\r\n\r\nx", false},
		{"a space before the colon", "GET", "HTTP/1.1 200 OK\r\nA : b\r\nContent-Length: 1\r\n\r\nx", false},
		{"no colon", "GET", "HTTP/1.1 200 OK\r\nA b\r\nContent-Length: 1\r\n\r\nx", false},
		{"empty name", "GET", "HTTP/1.1 200 OK\r\n: b\r\nContent-Length: 1\r\n\r\nx", false},
		{"a name not a token", "GET", "HTTP/1.1 200 OK\r\nA\"b: c\r\nContent-Length: 1\r\n\r\nx", false},
		{"a head larger than the buffer", "GET", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("v", 5000) + "\r\nContent-Length: 1\r\n\r\nx", false},
		{"garbage", "GET", "not an answer at all\r\n\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkReadAsNetHTTP(t, c.wire, c.method)
			if got := leanRead(c.wire, c.method); got != c.lean {
				t.Errorf("read by readResponse itself: got %v, want %v", got, c.lean)
			}
		})
	}
}

// FuzzReadResponseAsNetHTTP reads any bytes as an answer to a GET, a HEAD
// or a POST with readResponse and with http.ReadResponse, and compares all
// a client sees.
func FuzzReadResponseAsNetHTTP(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\nok\n", uint8(0))
	f.Add("HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 2\r\n\r\n{}", uint8(1))
	f.Add("HTTP/1.1 200 OK\r\nA:  b \r\nContent-Length: 1\r\nConnection: close\r\n\r\nxy", uint8(2))
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", uint8(0))
	f.Fuzz(func(t *testing.T, wire string, method uint8) {
		checkReadAsNetHTTP(t, wire, [...]string{"GET", "HEAD", "POST"}[method%3])
	})
}
