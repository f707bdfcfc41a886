package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// signalTimers are manualTimers that say when a timer is armed and each
// time one is pushed back (a read of the body moved), so that a test moves
// the fake clock only after the gateway has seen what it sent.
type signalTimers struct {
	manualTimers
	armed, reset chan struct{}
}

func newSignalTimers() *signalTimers {
	return &signalTimers{armed: make(chan struct{}, 16), reset: make(chan struct{}, 1024)}
}

func (s *signalTimers) afterFunc(d time.Duration, f func()) timer {
	tm := s.manualTimers.afterFunc(d, f)
	s.armed <- struct{}{}
	return signalTimer{tm, s.reset}
}

type signalTimer struct {
	timer
	reset chan struct{}
}

func (t signalTimer) Reset(d time.Duration) bool {
	ok := t.timer.Reset(d)
	t.reset <- struct{}{}
	return ok
}

// readAnswer reads one response from c, within 10 s, and its body.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body
}

// wait receives from c or fails the test after 10 s.
func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never happened", what)
	}
}

// A small body of known length is read whole before the upstream is asked:
// the upstream gets it in one piece with its Content-Length. The route
// timeout bounds the wait between two of its reads, as for a streamed
// upload: a body that keeps arriving is never cut however long it takes,
// one that stops gets a 408 and the upstream never sees the request. The
// client is a raw connection, so the test decides when each byte leaves;
// the fake clock moves only after the gateway has read what was sent.
func TestSmallBodyHeldBeforeForwarding(t *testing.T) {
	const (
		chunk   = 1000
		chunks  = 5
		timeout = 100 * time.Millisecond
	)
	for _, tt := range []struct {
		name       string
		gap        time.Duration // fake time after each chunk the gateway read
		sent       int           // chunks sent before the client stops
		wantStatus int
	}{
		{"slow body that moves", 60 * time.Millisecond, chunks, http.StatusOK},
		{"body that stalls", 60 * time.Millisecond, 2, http.StatusRequestTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				b, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%d %s %d", r.ContentLength, r.Header.Get("Content-Length"), len(b))
			}))
			timers := newSignalTimers()
			rt := testRoute(t, "upload", "/", up.URL)
			rt.Timeout = timeout
			gw, _ := newGateway(t, testSnapshot(t, nil, rt), fakeLimiter{}, gatewayOpts{afterFunc: timers.afterFunc})

			c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", chunk*chunks)
			wait(t, timers.armed, "the body's timer being armed")
			for i := range tt.sent {
				for len(timers.reset) > 0 { // pushes back from the last chunk's reads
					<-timers.reset
				}
				if _, err := c.Write(bytes.Repeat([]byte{'x'}, chunk)); err != nil {
					t.Fatal(err)
				}
				wait(t, timers.reset, fmt.Sprintf("the gateway reading chunk %d", i+1))
				if n := timers.advance(tt.gap); n != 0 {
					t.Fatalf("a timer fired after chunk %d, %s after the last read: the timeout is %s", i+1, tt.gap, timeout)
				}
			}
			if tt.sent < chunks {
				// Nothing more comes: the timeout passes with no read.
				if n := timers.advance(timeout); n != 1 {
					t.Fatalf("%d timers fired when the body stalled, want 1", n)
				}
			}
			resp, body := readAnswer(t, c)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusOK {
				if want := fmt.Sprintf("%d %d %d", chunk*chunks, chunk*chunks, chunk*chunks); string(body) != want {
					t.Errorf("upstream saw ContentLength, Content-Length and bytes %q, want %q", body, want)
				}
				return
			}
			if !strings.Contains(string(body), "stopped arriving") || !resp.Close {
				t.Errorf("408 body %s, closing %v: want the stall named and the connection closed", body, resp.Close)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the upstream was asked %d times for a body that never came, want 0", n)
			}
		})
	}
}

// cameWhole is a request body whose rest has arrived, as the lean
// server's says of a body that came with its head (Arrived).
type cameWhole struct{ io.Reader }

func (cameWhole) Arrived() bool { return true }
func (cameWhole) Close() error  { return nil }

// A small body that says it came with its head is read at once: nothing is
// left to wait for, so no timer is armed for it (and none for the exchange,
// on a transport that keeps the deadline). net/http's bodies cannot say so,
// and get the timer (TestSmallBodyHeldBeforeForwarding). proxy/h1's TestBodyArrived has the
// lean server's side.
func TestBodyThatCameWithItsHeadArmsNoTimer(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %s", r.ContentLength, b)
	}))
	timers := newSignalTimers()
	rt := testRoute(t, "upload", "/", up.URL)
	rt.Timeout = 100 * time.Millisecond
	tr := &keepingTransport{next: timerTransport(), deadlines: make(chan time.Time, 1)}
	_, h := newGateway(t, testSnapshot(t, nil, rt), fakeLimiter{}, gatewayOpts{afterFunc: timers.afterFunc, transport: tr})
	req := httptest.NewRequest("POST", "/upload", nil)
	req.Body, req.ContentLength = cameWhole{strings.NewReader("hello")}, 5
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "5 hello" {
		t.Fatalf("status %d body %q, want 200 and the upstream seeing the 5 bytes", rec.Code, rec.Body)
	}
	if n := len(timers.armed); n != 0 {
		t.Errorf("%d timers armed for a body that came with its head, want none", n)
	}
}

// A client that goes away in the middle of a small body: the upstream is
// never asked, and the gateway keeps serving.
func TestSmallBodyClientGone(t *testing.T) {
	var calls atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	timers := newSignalTimers()
	gw, _ := newGateway(t, testSnapshot(t, nil, testRoute(t, "upload", "/", up.URL)), fakeLimiter{}, gatewayOpts{afterFunc: timers.afterFunc})
	for range 16 {
		c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 5000\r\n\r\n%s", strings.Repeat("x", 100))
		wait(t, timers.armed, "the body's timer being armed")
		c.Close()
	}
	r := do(t, gw.Client(), "POST", gw.URL+"/upload", strings.NewReader("after"), nil)
	if r.status != http.StatusOK {
		t.Fatalf("a request after the clients left: status %d (%s)", r.status, r.body)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the upstream was asked %d times, want 1 (only the whole request)", n)
	}
}

// chunkReader hands out data in the chunks given, one per Read (less when
// the caller's buffer is smaller), and records what each Read was offered
// and how much it had handed out before.
type chunkReader struct {
	data   []byte
	chunks []int
	sent   int
	offers []struct{ offered, sentBefore int }
	err    error // returned once data is out; io.EOF when nil
}

func (c *chunkReader) Read(p []byte) (int, error) {
	c.offers = append(c.offers, struct{ offered, sentBefore int }{len(p), c.sent})
	if c.sent == len(c.data) {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := len(c.data) - c.sent
	if len(c.chunks) > 0 {
		n = min(n, c.chunks[0])
		c.chunks = c.chunks[1:]
	}
	n = copy(p, c.data[c.sent:c.sent+n])
	c.sent += n
	return n, nil
}

// readHeld returns exactly the declared bytes, however they arrive, and an
// error, not a short body, when fewer come.
func TestReadHeld(t *testing.T) {
	data := make([]byte, holdMax)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{1, 2, 100, holdFirst - 1, holdFirst, holdFirst + 1, 3 * holdFirst, holdMax - 1, holdMax} {
		for _, chunk := range []int{1, 3, 1000, holdFirst, holdMax} {
			name := fmt.Sprintf("n=%d/chunks=%d", n, chunk)
			src := &chunkReader{data: data[:n], chunks: repeat(chunk, n)}
			got, err := readHeld(src, n)
			if err != nil || !bytes.Equal(got, data[:n]) {
				t.Fatalf("%s: got %d bytes (equal %v), err %v", name, len(got), bytes.Equal(got, data[:n]), err)
			}
			if n < holdMax && src.sent != n {
				t.Fatalf("%s: read %d bytes past the declared %d", name, src.sent-n, n)
			}
			short := &chunkReader{data: data[:n-1], chunks: repeat(chunk, n)}
			if got, err := readHeld(short, n); err != io.ErrUnexpectedEOF || got != nil {
				t.Fatalf("%s, one byte short: got %d bytes, err %v; want io.ErrUnexpectedEOF", name, len(got), err)
			}
		}
	}
	broken := &chunkReader{data: data[:10], err: errBodyStalled}
	if _, err := readHeld(broken, 20); err != errBodyStalled {
		t.Fatalf("a failing read: err %v, want %v", err, errBodyStalled)
	}
}

// A client that declares a large body and sends it a byte at a time is
// never offered more buffer than holdFirst, or than twice what it has sent.
func TestReadHeldGrowsWithWhatArrives(t *testing.T) {
	data := bytes.Repeat([]byte("x"), holdMax)
	for _, chunk := range []int{1, 100, 3000} {
		src := &chunkReader{data: data, chunks: repeat(chunk, holdMax)}
		if _, err := readHeld(src, holdMax); err != nil {
			t.Fatal(err)
		}
		for _, o := range src.offers {
			// The buffer offered ends where the allocation does: at most
			// max(holdFirst, 2 × what had arrived before it was grown).
			if end := o.sentBefore + o.offered; end > max(holdFirst, 2*o.sentBefore) {
				t.Fatalf("chunks of %d: with %d bytes received, a read was offered %d more (a buffer of %d)", chunk, o.sentBefore, o.offered, end)
			}
		}
		if len(src.offers) < holdMax/max(chunk, holdFirst) {
			t.Fatalf("chunks of %d: %d reads, fewer than the body needs", chunk, len(src.offers))
		}
	}
}

func repeat(chunk, total int) []int {
	out := make([]int, 0, total/chunk+1)
	for range total/chunk + 1 {
		out = append(out, chunk)
	}
	return out
}
