package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
)

// Every gateway target's config, rendered as the run renders it, is one
// the gateway takes, with the policies and routes the target names.
func TestGatewayConfigsParse(t *testing.T) {
	dir := t.TempDir()
	for name, cfg := range gatewayConfigs {
		cfg.Name, cfg.Listen, cfg.Upstream, cfg.Redis = name, "127.0.0.1:0", "http://127.0.0.1:9", "127.0.0.1:6379"
		cfg.Policies = max(cfg.Policies, 1)
		policy := cfg.Policy
		if cfg.SampleRatio > 0 {
			cfg.Tracing = "http://127.0.0.1:4318"
		}
		if strings.HasSuffix(name, "-tls") {
			cfg.Cert, cfg.Key = "/etc/gateway/tls/tls.crt", "/etc/gateway/tls/tls.key"
		}
		path := filepath.Join(dir, name+".yaml")
		if err := render("gateway.yaml", path, cfg); err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policies.Parse(path, src, policies.Options{}); err != nil {
			t.Errorf("%s: %v\n%s", name, err, src)
		}
		routes := strings.Count(string(src), "\n  - name: ")
		if want := cfg.Routes + 1; routes != want {
			t.Errorf("%s: got %d routes, want %d", name, routes, want)
		}
		if n := strings.Count(string(src), ": "+policy+"\n"); policy != "" && n != cfg.Policies {
			t.Errorf("%s: got %d policies, want %d", name, n, cfg.Policies)
		}
	}
}

// An open-loop point sends its rate over at most -connections
// connections and counts what came back.
func TestAttack(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	o := options{load: load{connections: 4}}
	pt, err := attack(t.Context(), o, &target{name: "t", url: srv.URL}, 200, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pt.requests < 180 || pt.requests > 201 || pt.sent < 0.9 {
		t.Errorf("got %d requests, sent/asked %.3f; want about 200, >= 0.9", pt.requests, pt.sent)
	}
	if pt.non2xx < pt.requests/10-2 || pt.non2xx > pt.requests/10+2 || pt.errors != 0 {
		t.Errorf("got %d non-2xx and %d errors of %d, want a tenth and none", pt.non2xx, pt.errors, pt.requests)
	}
	if c := conns.Load(); c > 4 {
		t.Errorf("got %d connections, want at most 4", c)
	}
}
