// Command bareproxy is the side-by-side benchmark's anchor for a Go proxy: a
// bare httputil.ReverseProxy in front of one upstream, on net/http's
// http.Transport with the settings of the gateway's fallback transport and
// the gateway's copy-buffer pool, and nothing else (no routing, no canonical
// path, no limiter, no metrics): what httputil gives out of the box. The
// gateway with a policy is measured against it.
//
// With -deny it is the floor of a Go server's flood path instead: every
// request is answered by a bare net/http handler with a 429, Retry-After and
// a small JSON body, as a denial is, with nothing decided.
//
//	bareproxy -listen 127.0.0.1:8081 -upstream http://127.0.0.1:8080
//	bareproxy -listen 127.0.0.1:8081 -deny
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// bufferSize is the ReverseProxy's default copy buffer, as the gateway's.
const bufferSize = 32 << 10

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	upstream := flag.String("upstream", "", "upstream base URL, http://host:port (required without -deny)")
	deny := flag.Bool("deny", false, "answer every request with a 429 instead of forwarding it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *upstream, *deny); err != nil {
		log.Fatalf("bareproxy: %v", err)
	}
}

func run(ctx context.Context, listen, upstream string, deny bool) error {
	var handler http.Handler = http.HandlerFunc(tooMany)
	if !deny {
		target, err := url.Parse(upstream)
		if err != nil || target.Scheme != "http" || target.Host == "" {
			return fmt.Errorf("-upstream: want http://host:port, got %q", upstream)
		}
		handler = newProxy(target)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newProxy is the whole proxy: rewrite to target (with X-Forwarded-*, as the
// gateway sets them), a pooled transport, pooled copy buffers.
func newProxy(target *url.URL) *httputil.ReverseProxy {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		BufferPool: &bufferPool{p: sync.Pool{New: func() any { return new([bufferSize]byte) }}},
	}
}

// denial is a 429 body of the size the gateway's is.
var denial = []byte(`{"code":42900,"message":"rate limit exceeded for policy \"p\" (1 per 1m, burst 1); retry in 1m0s","policy":"p","retry_after_ms":59993}` + "\n")

// tooMany answers a request as a denial does, deciding nothing.
func tooMany(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json; charset=utf-8"}
	h["Retry-After"] = []string{"60"}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(denial)
}

// bufferPool recycles copy buffers; it stores array pointers so that Put
// does not allocate.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return b.p.Get().(*[bufferSize]byte)[:] }

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) >= bufferSize {
		b.p.Put((*[bufferSize]byte)(buf[:bufferSize]))
	}
}
