// Command bareproxy is the side-by-side benchmark's floor for a Go proxy: a
// bare httputil.ReverseProxy in front of one upstream, with the transport
// settings and copy-buffer pool the gateway uses, and nothing else (no
// routing, no canonical path, no limiter, no metrics). The gateway with a
// policy is measured against it.
//
//	bareproxy -listen 127.0.0.1:8081 -upstream http://127.0.0.1:8080
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
	upstream := flag.String("upstream", "", "upstream base URL, http://host:port (required)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *upstream); err != nil {
		log.Fatalf("bareproxy: %v", err)
	}
}

func run(ctx context.Context, listen, upstream string) error {
	target, err := url.Parse(upstream)
	if err != nil || target.Scheme != "http" || target.Host == "" {
		return fmt.Errorf("-upstream: want http://host:port, got %q", upstream)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           newProxy(target),
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

// bufferPool recycles copy buffers; it stores array pointers so that Put
// does not allocate.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return b.p.Get().(*[bufferSize]byte)[:] }

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) >= bufferSize {
		b.p.Put((*[bufferSize]byte)(buf[:bufferSize]))
	}
}
