package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// Both client servers serve the gateway's clients: lean (the default)
// answers a plain request itself and hands a connection with a chunked
// upload to net/http's server, as /metrics counts; standard serves every
// request with net/http's, and has no such series.
func TestClientServers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %q", r.Method, r.URL.Path, b)
	}))
	t.Cleanup(up.Close)
	for _, server := range []string{"lean", "standard"} {
		t.Run(server, func(t *testing.T) {
			g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(`
server:
  listen: 127.0.0.1:0
  client_server: %s
admin: {token: t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4}
routes:
  - {name: r, match: {path_prefix: /}, upstream: %q}
`, server, up.URL)))
			c := newTestClient(t)
			if r := mustSend(t, c, "GET", g.base+"/x"); r.status != 200 || string(r.body) != `GET /x ""` {
				t.Fatalf("GET /x: %d %q", r.status, r.body)
			}
			for _, body := range []io.Reader{
				strings.NewReader("declared"),                 // Content-Length: lean
				io.MultiReader(strings.NewReader("streamed")), // chunked: handed over
			} {
				resp, err := c.Post(g.base+"/up", "text/plain", body)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "POST /up ") {
					t.Fatalf("POST: %d %q", resp.StatusCode, b)
				}
			}
			_, text := adminDo(t, "GET", g.adminBase(t)+"/metrics", "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4")
			if server == "standard" {
				if strings.Contains(string(text), "gateway_client_lean_requests_total") {
					t.Fatal("the lean server's series are exposed with client_server: standard")
				}
				return
			}
			if got := scrapeValue(t, text, "gateway_client_lean_requests_total", ""); got < 2 {
				t.Errorf("gateway_client_lean_requests_total %v, want at least 2 (the GET and the declared POST)", got)
			}
			if got := scrapeValue(t, text, "gateway_client_handed_over_total", ""); got < 1 {
				t.Errorf("gateway_client_handed_over_total %v, want at least 1 (the chunked POST's connection)", got)
			}
		})
	}
}
