package h1_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/proxy"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// wireUpstream is the transport gateway serve builds (h1.Transport with
// net/http's as its fallback), dialing upstreamConns: make bench's nginx
// upstream in memory, so that an in-process benchmark pays for the
// transport's own work (the request written, the response read and framed,
// the connection pooled) as the gateway does against a socket.
func wireUpstream() *h1.Transport {
	dial := func(context.Context, string, string) (net.Conn, error) { return &upstreamConn{}, nil }
	standard := proxy.NewStandardTransport()
	standard.DialContext = dial
	return h1.New(h1.Config{Fallback: standard, Dial: dial})
}

// upstreamConn answers each whole request written to it as make bench's
// nginx upstream does (nginx-upstream.conf.tmpl): the chat completion for a
// POST to /v1/chat/completions, "ok\n" for anything else, with nginx's
// fields. The answer is ready by the time the request's last byte is
// written, so a read never waits.
type upstreamConn struct {
	mu       sync.Mutex
	in, out  []byte
	outStart int
	closed   bool
	// block makes a read with no answer pending wait for one, as on a
	// socket (blockingUpstreamDial); cond is what it waits on.
	block bool
	cond  sync.Cond
}

// blockingUpstreamDial dials upstreamConns whose reads wait for an answer:
// net/http's transport reads each connection in the background, before
// any request is written.
func blockingUpstreamDial(context.Context, string, string) (net.Conn, error) {
	c := &upstreamConn{block: true}
	c.cond.L = &c.mu
	return c, nil
}

var (
	errNoAnswerPending = errors.New("upstreamConn: read with no whole request written")
	nginxOK            = nginxAnswer("text/plain", "ok\n")
	nginxCompletion    = nginxAnswer("application/json", completionBody)
	chatRequestLine    = []byte("POST /v1/chat/completions ")
)

func nginxAnswer(contentType, body string) []byte {
	return []byte("HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sun, 06 Dec 2026 16:00:00 GMT\r\n" +
		"Content-Type: " + contentType + "\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nConnection: keep-alive\r\n\r\n" + body)
}

func (c *upstreamConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.block {
		defer c.cond.Broadcast()
	}
	c.in = append(c.in, p...)
	for {
		end := bytes.Index(c.in, []byte("\r\n\r\n"))
		if end < 0 {
			return len(p), nil
		}
		head := c.in[:end+4]
		size := len(head) + bodyLength(head)
		if len(c.in) < size {
			return len(p), nil
		}
		answer := nginxOK
		if bytes.HasPrefix(head, chatRequestLine) {
			answer = nginxCompletion
		}
		c.out = append(c.out, answer...)
		c.in = c.in[:copy(c.in, c.in[size:])]
	}
}

// bodyLength is a request head's Content-Length; the transport writes the
// field canonically, and nothing else frames a lean request's body.
func bodyLength(head []byte) int {
	const field = "\r\nContent-Length: "
	i := bytes.Index(head, []byte(field))
	if i < 0 {
		return 0
	}
	v := head[i+len(field):]
	n := 0
	for _, d := range v[:bytes.IndexByte(v, '\r')] {
		n = n*10 + int(d-'0')
	}
	return n
}

func (c *upstreamConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.block && c.outStart == len(c.out) && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.outStart == len(c.out) {
		return 0, errNoAnswerPending
	}
	n := copy(p, c.out[c.outStart:])
	c.outStart += n
	if c.outStart == len(c.out) {
		c.out, c.outStart = c.out[:0], 0
	}
	return n, nil
}

func (c *upstreamConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.block {
		c.cond.Broadcast()
	}
	return nil
}

func (c *upstreamConn) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40001}
}
func (c *upstreamConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}
func (c *upstreamConn) SetDeadline(time.Time) error      { return nil }
func (c *upstreamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *upstreamConn) SetWriteDeadline(time.Time) error { return nil }
