package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

// countingServer is an httptest server that counts the connections it
// accepted and closed.
type countingServer struct {
	*httptest.Server
	opened, closed atomic.Int64
	closes         chan struct{} // one value per closed connection
}

func newCountingServer(t testing.TB, h http.Handler) *countingServer {
	t.Helper()
	s := &countingServer{closes: make(chan struct{}, 1024)}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
			s.closes <- struct{}{}
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// waitClosed waits until n connections have closed.
func (s *countingServer) waitClosed(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-s.closes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d connections closed after 10s", s.closed.Load(), n)
		}
	}
}

// rawServer accepts connections on loopback and hands each to serve with its
// index (0 for the first). It returns the address.
func rawServer(t *testing.T, serve func(i int, c net.Conn, br *bufio.Reader)) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := int(accepted.Add(1)) - 1
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(i, c, bufio.NewReader(c))
			}()
		}
	}()
	return ln.Addr().String(), accepted
}

// readRequest reads one request and its body from br.
func readRequest(br *bufio.Reader) (*http.Request, []byte, error) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(r.Body)
	return r, b, err
}

// newFakeClock is a settable clock for the idle timeout.
func newFakeClock() *clocktest.Clock { return clocktest.New(time.Unix(1_700_000_000, 0)) }

// okServer is an upstream that reads each request's body and answers "ok".
func okServer(t testing.TB) *countingServer {
	return newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
}

// countingFallback counts the requests the lean path handed over.
type countingFallback struct {
	rt    http.RoundTripper
	calls atomic.Int64
}

func (f *countingFallback) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	return f.rt.RoundTrip(r)
}

// newTestTransport is a Transport with a counted fallback and clk.
func newTestTransport(t *testing.T, cfg Config) (*Transport, *countingFallback) {
	t.Helper()
	std := &http.Transport{DisableCompression: true}
	fb := &countingFallback{rt: std}
	cfg.Fallback = fb
	tr := New(cfg)
	t.Cleanup(tr.CloseIdleConnections)
	t.Cleanup(std.CloseIdleConnections)
	return tr, fb
}

// get sends a GET for url through tr and reads the whole body.
func get(t *testing.T, tr http.RoundTripper, url string) (*http.Response, string) {
	t.Helper()
	return send(t, tr, mustRequest(t, context.Background(), "GET", url, nil))
}

func mustRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send sends r through tr and reads the whole body.
func send(t *testing.T, tr http.RoundTripper, r *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := tr.RoundTrip(r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", r.Method, r.URL, err)
	}
	return res, string(b)
}

// idleCount is how many connections tr keeps idle.
func idleCount(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, l := range tr.idle {
		n += len(l)
	}
	return n
}
