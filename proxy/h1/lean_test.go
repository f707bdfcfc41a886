package h1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// The lean path carries what it can write whole before reading the answer;
// anything an upstream could leave unread (a large body, one of unknown
// length, a stream) goes to the fallback, which reads while it writes.
func TestLean(t *testing.T) {
	// held is a body in memory (GetBody) of n bytes, announced as n (-1:
	// unknown, sent chunked).
	held := func(n int64) *http.Request {
		b := bytes.Repeat([]byte("x"), int(max(n, 100)))
		r, _ := http.NewRequest(http.MethodPost, "http://upstream/pay", bytes.NewReader(b))
		r.ContentLength = n
		return r
	}
	streamed := func() *http.Request {
		r := held(10)
		r.GetBody = nil
		r.Body = io.NopCloser(bytes.NewReader([]byte("0123456789")))
		return r
	}
	get, _ := http.NewRequest(http.MethodGet, "http://upstream/", nil)
	tls, _ := http.NewRequest(http.MethodGet, "https://upstream/", nil)
	tests := []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"GET", get, true},
		{"https", tls, false},
		{"small held body", held(1024), true},
		{"held body at the bound", held(MaxLeanBody), true},
		{"held body past the bound", held(MaxLeanBody + 1), false},
		{"10 MB held body", held(10_000_000), false},
		{"held body of unknown length", held(-1), false},
		{"streamed body", streamed(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := (&Transport{}).KeepsDeadline(tc.req); got != tc.want {
				t.Fatalf("KeepsDeadline: got %v, want %v", got, tc.want)
			}
		})
	}
}

// heldConn lets its first Write through and holds every later one until
// release is closed, so that a test can let the upstream answer and reset
// the connection in the middle of a request's body.
type heldConn struct {
	net.Conn
	writes  int
	release <-chan struct{}
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes > 1 {
		<-c.release
	}
	return c.Conn.Write(p)
}

// An upstream that answers 413 after the request's headers and resets the
// connection while the body is still being written: the write fails, and
// the answer already received is what RoundTrip returns, on a connection
// that is not used again.
func TestEarlyAnswerAfterAFailedWrite(t *testing.T) {
	answered := make(chan struct{})
	const answer = `{"error":"too large"}`
	addr, _ := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: "+strconv.Itoa(len(answer))+"\r\n\r\n"+answer)
		c.(*net.TCPConn).SetLinger(0) // the close resets: unread body bytes are waiting
		c.Close()
		close(answered)
	})
	var dialer net.Dialer
	tr, fb := newTestTransport(t, Config{Dial: func(ctx context.Context, network, a string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, a)
		if err != nil {
			return nil, err
		}
		return &heldConn{Conn: c, release: answered}, nil
	}})
	body := bytes.Repeat([]byte("x"), 32<<10) // several buffered writes, within MaxLeanBody
	req := mustRequest(t, context.Background(), http.MethodPost, "http://"+addr+"/upload", bytes.NewReader(body))
	res, got := send(t, tr, req)
	if res.StatusCode != http.StatusRequestEntityTooLarge || got != answer {
		t.Fatalf("got %d %q, want 413 %q", res.StatusCode, got, answer)
	}
	if n := fb.calls.Load(); n != 0 {
		t.Fatalf("%d requests went to the fallback, want 0 (the lean path)", n)
	}
	if n := idleCount(tr); n != 0 {
		t.Fatalf("%d idle connections after a failed write, want 0", n)
	}
}
