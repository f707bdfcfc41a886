package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Both upstream transports carry requests and keep the route timeout: lean
// (the default) by its connections' deadlines, standard by the route timer.
func TestUpstreamTransports(t *testing.T) {
	block := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-block:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok:"+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(block) }) // before up.Close (cleanups run last first)
	for _, transport := range []string{"lean", "standard"} {
		t.Run(transport, func(t *testing.T) {
			g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(`
server:
  listen: 127.0.0.1:0
  upstream_transport: %s
routes:
  - {name: r, match: {path_prefix: /}, upstream: %q, timeout: 100ms}
`, transport, up.URL)))
			c := newTestClient(t)
			for range 3 {
				if r := mustSend(t, c, "GET", g.base+"/x"); r.status != 200 || string(r.body) != "ok:/x" {
					t.Fatalf("GET /x: %d %q", r.status, r.body)
				}
			}
			r := mustSend(t, c, "GET", g.base+"/slow")
			if r.status != http.StatusGatewayTimeout || r.errorBody(t).Code != 50400 {
				t.Fatalf("GET /slow: %d %q, want 504", r.status, r.body)
			}
		})
	}
}
