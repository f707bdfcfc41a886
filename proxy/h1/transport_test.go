package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Requests one after another share one connection, and each gets its own
// answer.
func TestSequentialRequestsShareOneConnection(t *testing.T) {
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.RequestURI())
	}))
	tr, fb := newTestTransport(t, Config{})
	for i := range 50 {
		path := fmt.Sprintf("/n/%d?q=%d", i, i)
		res, body := get(t, tr, up.URL+path)
		if res.StatusCode != 200 || body != path {
			t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
		}
	}
	if n := up.opened.Load(); n != 1 {
		t.Errorf("%d connections opened for 50 requests in a row, want 1", n)
	}
	if n := fb.calls.Load(); n != 0 {
		t.Errorf("%d requests went to the fallback, want 0", n)
	}
	if st, want := tr.Stats(), (Stats{Dials: 1, Reused: 49, Idle: 1}); st != want {
		t.Errorf("Stats %+v, want %+v", st, want)
	}
}

// 64 clients at once: every response is the answer to its own request (no
// connection carries two exchanges at once), and no more connections are
// opened than there are clients.
func TestConcurrentClientsGetTheirOwnAnswers(t *testing.T) {
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	tr, _ := newTestTransport(t, Config{})
	const clients, each = 64, 40
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				path := fmt.Sprintf("/c%d/%d", c, i)
				var r *http.Request
				want := "GET " + path + " "
				if i%2 == 1 { // a body that can be read again takes the lean path too
					payload := fmt.Sprintf("body-%d-%d", c, i)
					r, _ = http.NewRequest("POST", up.URL+path, strings.NewReader(payload))
					want = "POST " + path + " " + payload
				} else {
					r, _ = http.NewRequest("GET", up.URL+path, nil)
				}
				res, err := tr.RoundTrip(r)
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || string(b) != want || res.Header.Get("X-Path") != path {
					errs <- fmt.Errorf("%s: got %q (%v), X-Path %q", want, b, err, res.Header.Get("X-Path"))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := up.opened.Load(); n > clients {
		t.Errorf("%d connections for %d clients", n, clients)
	}
	if n := idleCount(tr); n != int(up.opened.Load()) {
		t.Errorf("%d idle connections after the load, want all %d open ones", n, up.opened.Load())
	}
}

// A chunked body's trailers arrive with its end, and the connection is used
// again after it.
func TestChunkedBodyWithTrailers(t *testing.T) {
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "part one,")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part two")
		w.Header().Set("X-Sum", "42")
	}))
	tr, _ := newTestTransport(t, Config{})
	for range 2 {
		res, body := get(t, tr, up.URL+"/")
		if body != "part one,part two" || res.ContentLength != -1 {
			t.Fatalf("body %q, length %d", body, res.ContentLength)
		}
		if got := res.Trailer.Get("X-Sum"); got != "42" {
			t.Errorf("trailer X-Sum = %q, want 42", got)
		}
	}
	if n := up.opened.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// Responses without a body (HEAD, 204, 304) give the connection back at once.
func TestResponsesWithoutBody(t *testing.T) {
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}
	}))
	tr, _ := newTestTransport(t, Config{})
	for _, tt := range []struct {
		method, path string
		status       int
		length       int64
	}{
		{"HEAD", "/", 200, 5},
		{"GET", "/204", 204, 0},
		{"GET", "/304", 304, 0},
		{"HEAD", "/", 200, 5},
		{"GET", "/", 200, 5},
	} {
		res, body := send(t, tr, mustRequest(t, context.Background(), tt.method, up.URL+tt.path, nil))
		want := ""
		if tt.method == "GET" && tt.status == 200 {
			want = "hello"
		}
		if res.StatusCode != tt.status || body != want || res.ContentLength != tt.length {
			t.Errorf("%s %s: %d %q length %d, want %d %q length %d", tt.method, tt.path, res.StatusCode, body, res.ContentLength, tt.status, want, tt.length)
		}
		if n := idleCount(tr); n != 1 {
			t.Errorf("%s %s: %d idle connections once the headers arrived, want 1", tt.method, tt.path, n)
		}
	}
	if n := up.opened.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// An upstream that says Connection: close gets a new connection next time,
// and the old one is closed.
func TestConnectionCloseIsHonoured(t *testing.T) {
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	}))
	tr, _ := newTestTransport(t, Config{})
	for range 3 {
		if _, body := get(t, tr, up.URL+"/"); body != "bye" {
			t.Fatalf("body %q", body)
		}
	}
	up.waitClosed(t, 3)
	if n := up.opened.Load(); n != 3 {
		t.Errorf("%d connections for 3 requests, want 3", n)
	}
	if n := idleCount(tr); n != 0 {
		t.Errorf("%d idle connections, want 0", n)
	}
}

// An HTTP/1.0 answer without a length ends where the upstream closes.
func TestBodyEndingAtClose(t *testing.T) {
	addr, accepted := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
	})
	tr, _ := newTestTransport(t, Config{})
	for range 2 {
		res, body := get(t, tr, "http://"+addr+"/")
		if body != "until the end" || !res.Close {
			t.Fatalf("body %q, Close %v", body, res.Close)
		}
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (none reused after a body that ended at close)", n)
	}
}

// Headers past the limit are an error, not memory.
func TestResponseHeaderLimit(t *testing.T) {
	addr, _ := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Big: %s\r\nContent-Length: 2\r\n\r\nok", strings.Repeat("a", 64<<10))
	})
	tr, _ := newTestTransport(t, Config{MaxResponseHeaderBytes: 4 << 10})
	_, err := tr.RoundTrip(mustRequest(t, context.Background(), "GET", "http://"+addr+"/", nil))
	if !errors.Is(err, errHeaderTooLarge) {
		t.Fatalf("err = %v, want the header limit", err)
	}
	if n := idleCount(tr); n != 0 {
		t.Errorf("%d idle connections after a failed exchange, want 0", n)
	}
}

// Cancelling the request's context ends the wait for an upstream that does
// not answer, and the connection is closed.
func TestCancelEndsTheWait(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	tr, _ := newTestTransport(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := tr.RoundTrip(mustRequest(t, ctx, "GET", up.URL+"/", nil))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	up.waitClosed(t, 1)
	if n := idleCount(tr); n != 0 {
		t.Errorf("%d idle connections, want 0", n)
	}
}

// A body closed before its end closes its connection (what is left would
// have to be read first); one read to its end gives it back.
func TestBodyClosedEarlyClosesTheConnection(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, big)
	}))
	tr, _ := newTestTransport(t, Config{})
	res, err := tr.RoundTrip(mustRequest(t, context.Background(), "GET", up.URL+"/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if _, err := res.Body.Read(make([]byte, 1)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("read after close: %v, want ErrBodyReadAfterClose", err)
	}
	up.waitClosed(t, 1)
	if _, body := get(t, tr, up.URL+"/"); body != big {
		t.Fatalf("second body: %d bytes", len(body))
	}
	if n, idle := up.opened.Load(), idleCount(tr); n != 2 || idle != 1 {
		t.Errorf("%d connections opened, %d idle; want 2 and 1", n, idle)
	}
}

// A connection the upstream closed while it sat idle is not used: the next
// request goes on a new one and succeeds.
func TestIdleConnectionClosedByUpstream(t *testing.T) {
	closed := make(chan struct{}, 2)
	addr, accepted := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.Close() // no Connection: close: the client cannot know
		closed <- struct{}{}
	})
	tr, _ := newTestTransport(t, Config{})
	for i := range 2 {
		// POST, not replayable: only the check before reuse can save it.
		res, body := send(t, tr, mustRequest(t, context.Background(), "POST", "http://"+addr+"/", strings.NewReader("x")))
		if res.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
		<-closed
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if st := tr.Stats(); st.Dials != 2 || st.Stale != 1 || st.Reused != 0 || st.Retries != 0 {
		t.Errorf("Stats %+v, want 2 dials, 1 stale, none reused or retried", st)
	}
}

// An upstream that drops a reused connection after reading a request,
// without a byte of answer: the request is sent again on a new connection
// when that is harmless (GET; a POST with an Idempotency-Key and a body that
// can be read again, which arrives whole), and fails otherwise.
func TestRetryOnlyWhenHarmless(t *testing.T) {
	for _, tt := range []struct {
		name      string
		method    string
		header    http.Header
		wantRetry bool
	}{
		{"GET", "GET", nil, true},
		{"POST with Idempotency-Key", "POST", http.Header{"Idempotency-Key": {"k1"}}, true},
		{"POST", "POST", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bodies := make(chan string, 4)
			addr, accepted := rawServer(t, func(i int, c net.Conn, br *bufio.Reader) {
				for n := 0; ; n++ {
					_, b, err := readRequest(br)
					if err != nil {
						return
					}
					if i == 0 && n == 1 {
						return // the second request on the first connection: dropped
					}
					bodies <- string(b)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			tr, _ := newTestTransport(t, Config{})
			get(t, tr, "http://"+addr+"/warm")
			<-bodies
			req := mustRequest(t, context.Background(), tt.method, "http://"+addr+"/", nil)
			if tt.method == "POST" {
				req = mustRequest(t, context.Background(), tt.method, "http://"+addr+"/", bytes.NewReader([]byte("payload")))
			}
			for k, v := range tt.header {
				req.Header[k] = v
			}
			res, err := tr.RoundTrip(req)
			if !tt.wantRetry {
				if err == nil {
					res.Body.Close()
					t.Fatal("a POST without a key was answered: it must not have been sent twice")
				}
				if n := accepted.Load(); n != 1 {
					t.Errorf("%d connections, want 1 (no retry)", n)
				}
				if n := tr.Stats().Retries; n != 0 {
					t.Errorf("%d retries counted, want 0", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("not retried: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(b) != "ok" {
				t.Fatalf("body %q", b)
			}
			want := ""
			if tt.method == "POST" {
				want = "payload"
			}
			if got := <-bodies; got != want {
				t.Errorf("the retried request carried %q, want %q", got, want)
			}
			if n := accepted.Load(); n != 2 {
				t.Errorf("%d connections, want 2", n)
			}
			if n := tr.Stats().Retries; n != 1 {
				t.Errorf("%d retries counted, want 1", n)
			}
		})
	}
}

// 1xx answers before the final one reach the client trace (ReverseProxy
// passes them on to the client); 100 Continue is skipped the same way.
func TestInformationalResponses(t *testing.T) {
	addr, _ := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 100 Continue\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
	})
	tr, _ := newTestTransport(t, Config{})
	var got []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			got = append(got, fmt.Sprintf("%d %s", code, h.Get("Link")))
			return nil
		},
	})
	res, body := send(t, tr, mustRequest(t, ctx, "GET", "http://"+addr+"/", nil))
	if res.StatusCode != 200 || body != "done" {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	want := []string{"103 </style.css>; rel=preload", "100 "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("1xx seen %q, want %q", got, want)
	}
}

// Bytes the upstream sends unasked after an answer mean the connection is not
// in step: it is closed, not reused.
func TestUnsolicitedBytesRetireTheConnection(t *testing.T) {
	addr, accepted := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE")
		}
	})
	tr, _ := newTestTransport(t, Config{})
	for range 3 {
		if _, body := get(t, tr, "http://"+addr+"/"); body != "ok" {
			t.Fatalf("body %q", body)
		}
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

// What the lean path does not do goes to the fallback: uploads that stream,
// upgrades, Expect, TLS; the rest does not.
func TestFallbackTakesWhatTheLeanPathDoesNot(t *testing.T) {
	up := okServer(t)
	tr, fb := newTestTransport(t, Config{})
	streamed := func() *http.Request {
		r := mustRequest(t, context.Background(), "POST", up.URL+"/", io.NopCloser(strings.NewReader("stream")))
		r.GetBody = nil
		return r
	}
	withHeader := func(k, v string) *http.Request {
		r := mustRequest(t, context.Background(), "GET", up.URL+"/", nil)
		r.Header.Set(k, v)
		return r
	}
	for _, tt := range []struct {
		name     string
		req      *http.Request
		fallback bool
	}{
		{"GET", mustRequest(t, context.Background(), "GET", up.URL+"/", nil), false},
		{"POST with a body read again", mustRequest(t, context.Background(), "POST", up.URL+"/", strings.NewReader("held")), false},
		{"POST streamed", streamed(), true},
		{"Upgrade", withHeader("Upgrade", "websocket"), true},
		{"Expect", withHeader("Expect", "100-continue"), true},
	} {
		before := fb.calls.Load()
		res, err := tr.RoundTrip(tt.req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if got := fb.calls.Load() - before; got != map[bool]int64{false: 0, true: 1}[tt.fallback] {
			t.Errorf("%s: %d fallback calls, want fallback=%v", tt.name, got, tt.fallback)
		}
	}
	tls := mustRequest(t, context.Background(), "GET", "https://127.0.0.1:1/", nil)
	before := fb.calls.Load()
	if _, err := tr.RoundTrip(tls); err == nil {
		t.Error("https to a closed port answered")
	}
	if fb.calls.Load() != before+1 {
		t.Error("an https request did not go to the fallback")
	}
	if n := tr.Stats().Fallback; n != fb.calls.Load() {
		t.Errorf("Stats.Fallback %d, want the %d the fallback saw", n, fb.calls.Load())
	}
}

// Connections idle past the timeout are closed, whether a request finds them
// or the pruner does; fresher ones stay.
func TestIdleTimeout(t *testing.T) {
	up := okServer(t)
	clk := newFakeClock()
	tr, _ := newTestTransport(t, Config{IdleTimeout: time.Minute, Now: clk.Now})

	get(t, tr, up.URL+"/")
	clk.Advance(time.Minute + time.Second)
	get(t, tr, up.URL+"/") // finds the first one stale: closes it, dials
	up.waitClosed(t, 1)
	if n := up.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}

	clk.Advance(30 * time.Second)
	tr.prune() // the second is 30 s idle: kept
	if n := idleCount(tr); n != 1 {
		t.Fatalf("%d idle after 30 s, want 1", n)
	}
	tr.mu.Lock()
	rearmed := tr.pruner != nil
	tr.mu.Unlock()
	if !rearmed {
		t.Fatal("the pruner is not armed with a connection idle")
	}
	clk.Advance(31 * time.Second)
	tr.prune()
	up.waitClosed(t, 1)
	if n := idleCount(tr); n != 0 {
		t.Errorf("%d idle after 61 s, want 0", n)
	}
	tr.mu.Lock()
	armed := tr.pruner != nil
	tr.mu.Unlock()
	if armed {
		t.Error("the pruner is armed with nothing idle")
	}
}

// No more than MaxIdlePerHost connections stay idle; the others close.
func TestMaxIdlePerHost(t *testing.T) {
	const clients, keep = 8, 3
	var arrived sync.WaitGroup
	arrived.Add(clients)
	all := make(chan struct{})
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-all // every client holds a connection at once
		io.WriteString(w, "ok")
	}))
	tr, _ := newTestTransport(t, Config{MaxIdlePerHost: keep})
	go func() {
		arrived.Wait()
		close(all)
	}()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			res, err := tr.RoundTrip(mustRequest(t, context.Background(), "GET", up.URL+"/", nil))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		})
	}
	wg.Wait()
	up.waitClosed(t, clients-keep)
	if n := idleCount(tr); n != keep {
		t.Errorf("%d idle, want %d", n, keep)
	}
}

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"example.com":      "example.com:80",
		"example.com:8080": "example.com:8080",
		"127.0.0.1":        "127.0.0.1:80",
		"[::1]":            "[::1]:80",
		"[::1]:9000":       "[::1]:9000",
	} {
		if got := hostPort(in); got != want {
			t.Errorf("hostPort(%q) = %q, want %q", in, got, want)
		}
	}
}

// Cancelling the request while its body is read ends the read with the
// context's error (ReverseProxy logs anything else as an upstream failure)
// and closes the connection.
func TestCancelWhileReadingTheBody(t *testing.T) {
	sent := make(chan struct{})
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first part")
		w.(http.Flusher).Flush()
		close(sent)
		<-r.Context().Done() // the rest never comes
	}))
	tr, _ := newTestTransport(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	res, err := tr.RoundTrip(mustRequest(t, ctx, "GET", up.URL+"/", nil))
	if err != nil {
		t.Fatal(err)
	}
	<-sent
	buf := make([]byte, len("first part"))
	if _, err := io.ReadFull(res.Body, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := res.Body.Read(buf); err != context.Canceled {
		t.Errorf("read after cancel: %v, want context.Canceled itself", err)
	}
	res.Body.Close()
	up.waitClosed(t, 1)
	if n := idleCount(tr); n != 0 {
		t.Errorf("%d idle connections, want 0", n)
	}
}

// WroteRequest is called once per exchange: the route deadline is pushed
// back by it, and once is what "the whole request is written" means.
func TestWroteRequestOncePerExchange(t *testing.T) {
	up := okServer(t)
	tr, _ := newTestTransport(t, Config{})
	var wrote int
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err != nil {
				t.Errorf("WroteRequest: %v", info.Err)
			}
			wrote++
		},
	})
	send(t, tr, mustRequest(t, ctx, "GET", up.URL+"/", nil))
	send(t, tr, mustRequest(t, ctx, "POST", up.URL+"/", strings.NewReader("body")))
	if wrote != 2 {
		t.Errorf("WroteRequest called %d times for 2 requests, want 2", wrote)
	}
}

// deadlineCtx has a deadline that nothing but its reader keeps: its Done
// never closes, so only the transport's own connection deadlines can end an
// exchange at it (as KeepsDeadline promises a caller that arms no timer).
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

func deadlineIn(d time.Duration) deadlineCtx {
	return deadlineCtx{Context: context.Background(), at: time.Now().Add(d)}
}

// The request context's deadline bounds the wait for the headers: an
// upstream that takes the request and never answers gets an error that is
// context.DeadlineExceeded, and the request is not sent again, even a GET
// on a reused connection.
func TestTimeoutBoundsTheWaitForHeaders(t *testing.T) {
	addr, accepted := rawServer(t, func(i int, c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			if n == 1 {
				io.Copy(io.Discard, br) // holds the connection, answers nothing
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr, _ := newTestTransport(t, Config{})
	send(t, tr, mustRequest(t, deadlineIn(10*time.Second), "GET", "http://"+addr+"/first", nil))
	_, err := tr.RoundTrip(mustRequest(t, deadlineIn(50*time.Millisecond), "GET", "http://"+addr+"/stalls", nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d connections: a timed-out request was sent again", n)
	}
	if n := idleCount(tr); n != 0 {
		t.Errorf("%d idle connections after a timeout, want 0", n)
	}
}

// Once the headers are in, the body flows without a limit (but for what
// ends the context itself): a body that comes
// later than the timeout is read whole, and the connection is reused with
// no deadline left on it.
func TestTimeoutDoesNotCutTheBody(t *testing.T) {
	const timeout = 20 * time.Millisecond
	up := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "head,")
		w.(http.Flusher).Flush()
		// Time passing is the point here: the body's rest comes after
		// the timeout would have cut it.
		<-time.After(3 * timeout)
		io.WriteString(w, "tail")
	}))
	tr, _ := newTestTransport(t, Config{})
	for range 2 {
		if _, body := send(t, tr, mustRequest(t, deadlineIn(timeout), "GET", up.URL+"/", nil)); body != "head,tail" {
			t.Fatalf("body %q", body)
		}
	}
	// Without a timeout, on the same connection: no deadline left over.
	if _, body := get(t, tr, up.URL+"/"); body != "head,tail" {
		t.Fatalf("body %q", body)
	}
	if n := up.opened.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// testBudget grants every retry or none, and counts the asks and returns.
type testBudget struct {
	grant       bool
	asked, back atomic.Int64
}

func (b *testBudget) TryRetry() bool { b.asked.Add(1); return b.grant }
func (b *testBudget) RetryDone()     { b.back.Add(1) }

// The resend of a request whose reused connection closed before answering
// draws on Config.Retries, the budget the gateway's pools share: with none
// left, the request fails instead; with one, it is taken and given back.
func TestRetryDrawsOnTheBudget(t *testing.T) {
	for _, grant := range []bool{false, true} {
		t.Run(fmt.Sprint("grant=", grant), func(t *testing.T) {
			addr, accepted := rawServer(t, func(i int, c net.Conn, br *bufio.Reader) {
				for n := 0; ; n++ {
					if _, _, err := readRequest(br); err != nil {
						return
					}
					if i == 0 && n == 1 {
						return // the second request on the first connection: dropped
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			budget := &testBudget{grant: grant}
			tr, _ := newTestTransport(t, Config{Retries: budget})
			get(t, tr, "http://"+addr+"/warm")
			res, err := tr.RoundTrip(mustRequest(t, context.Background(), "GET", "http://"+addr+"/", nil))
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			if grant != (err == nil) {
				t.Fatalf("grant %v: got err %v", grant, err)
			}
			if budget.asked.Load() != 1 {
				t.Errorf("the budget was asked %d times, want 1", budget.asked.Load())
			}
			want := int64(0)
			if grant {
				want = 1
			}
			if budget.back.Load() != want || accepted.Load() != 1+want {
				t.Errorf("given back %d, %d connections; want %d and %d", budget.back.Load(), accepted.Load(), want, 1+want)
			}
		})
	}
}
