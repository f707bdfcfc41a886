package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// The lean transport's pool and counters, as serve hands them to the
// metrics, after requests over real HTTP: one connection dialed and reused,
// one request handed to the fallback.
func TestLeanTransportStats(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	fallback := &http.Transport{}
	tr := h1.New(h1.Config{Fallback: fallback})
	t.Cleanup(tr.CloseIdleConnections)

	send := func(r *http.Request) {
		t.Helper()
		res, err := tr.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	for range 3 {
		r, _ := http.NewRequest("GET", up.URL+"/", nil)
		send(r)
	}
	streamed, _ := http.NewRequest("POST", up.URL+"/", io.NopCloser(io.LimitReader(neverEnding{}, 10)))
	streamed.ContentLength = 10
	send(streamed)

	want := metrics.TransportStats{Dials: 1, Reused: 2, Fallback: 1, Idle: 1}
	if got := transportStats(tr)(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// neverEnding is a body that is not in memory: it streams.
type neverEnding struct{}

func (neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// The lean client server's counters, as serve hands them to the metrics,
// after requests over real HTTP: two answered on the lean path, one
// connection (HTTP/1.0) handed over.
func TestLeanServerStats(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		Fallback: &http.Server{}}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, raw)
		io.Copy(io.Discard, c) // both answers, then the server closes
		c.Close()
	}
	want := metrics.ClientServerStats{Served: 2, HandedOver: 1}
	if got := clientServerStats(srv)(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
