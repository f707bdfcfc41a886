package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// output is everything the gateway wrote so far, one line per log line.
func (g *gateway) output() string {
	g.log.mu.Lock()
	defer g.log.mu.Unlock()
	return strings.Join(g.log.lines, "\n")
}

// kubernetesServiceEnv is what Kubernetes puts in every container of a
// namespace that has a Service named "gateway" with a port named http.
var kubernetesServiceEnv = map[string]string{
	"GATEWAY_PORT":                "tcp://10.0.0.1:8080",
	"GATEWAY_SERVICE_HOST":        "10.0.0.1",
	"GATEWAY_SERVICE_PORT":        "8080",
	"GATEWAY_SERVICE_PORT_HTTP":   "8080",
	"GATEWAY_PORT_8080_TCP":       "tcp://10.0.0.1:8080",
	"GATEWAY_PORT_8080_TCP_PROTO": "tcp",
	"GATEWAY_PORT_8080_TCP_PORT":  "8080",
	"GATEWAY_PORT_8080_TCP_ADDR":  "10.0.0.1",
}

// TestServeWithKubernetesServiceVariables: the variables name no setting,
// so the gateway starts and says, once per variable, that it ignores them.
func TestServeWithKubernetesServiceVariables(t *testing.T) {
	for k, v := range kubernetesServiceEnv {
		t.Setenv(k, v)
	}
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	g, exited := serveOutcome(t, "gateway", copyDefaultConfig(t))
	if exited {
		t.Fatalf("serve exited %d, want it to start; output:\n%s", g.code, g.output())
	}
	for name := range kubernetesServiceEnv {
		g.waitLog(t, 0, regexp.MustCompile(`level=WARN msg="config warning" warning="environment: `+name+`: matches no setting, ignored`))
	}
	mustSend(t, newTestClient(t), "GET", g.base+"/")
}

// TestCheckReportsVariablesThatNameNoSetting: check prints each as a
// warning on stderr and still exits 0; a bad value for a real setting
// still fails it.
func TestCheckReportsVariablesThatNameNoSetting(t *testing.T) {
	for k, v := range kubernetesServiceEnv {
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-config", "../../gateway.yaml"}, &out, &errOut); code != 0 {
		t.Fatalf("check exited %d, want 0; stderr:\n%s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "ok (5 routes, 5 policies)") {
		t.Errorf("stdout:\n%s\nwant the summary", out.String())
	}
	for name := range kubernetesServiceEnv {
		want := "warning: environment: " + name + ": matches no setting, ignored"
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr:\n%s\nwant a line starting %q", errOut.String(), want)
		}
	}

	t.Setenv("GATEWAY_POLICIES_PER_IP_RATE", "many")
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"check", "-config", "../../gateway.yaml"}, &out, &errOut); code != 1 {
		t.Fatalf("check with a bad override exited %d, want 1", code)
	}
	if want := "policies.per-ip.rate (from GATEWAY_POLICIES_PER_IP_RATE)"; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", errOut.String(), want)
	}
}

// TestServeRefusesAFIFOConfigAtStart: opening a FIFO blocks until a writer
// comes; the gateway must refuse it at once instead.
func TestServeRefusesAFIFOConfigAtStart(t *testing.T) {
	path := t.TempDir() + "/gateway.yaml"
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	g, exited := serveOutcome(t, "gateway", path)
	if !exited || g.code != 1 {
		t.Fatalf("got exited %v code %d, want exit 1; output:\n%s", exited, g.code, g.output())
	}
	if want := "gateway: loading config: " + path + ": is a named pipe, not a regular file"; !strings.Contains(g.output(), want) {
		t.Errorf("output:\n%s\nwant %q", g.output(), want)
	}
}

// TestServeStopsWhileTheConfigIsAFIFO: the config path replaced by a FIFO,
// then a SIGHUP, then the watcher seeing it replaced again: each reload
// fails at once and keeps the old config, and the gateway still drains and
// returns when its context ends (startGateway's cleanup checks that).
func TestServeStopsWhileTheConfigIsAFIFO(t *testing.T) {
	path := copyDefaultConfig(t)
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	g := startGateway(t, "gateway", path)
	toFIFO := func() {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	failed := regexp.MustCompile(`config reload failed.*is a named pipe, not a regular file`)

	toFIFO()
	from := g.logLen()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, from, regexp.MustCompile(`SIGHUP: reloading config`))
	g.waitLog(t, from, failed)

	g.waitLog(t, 0, regexp.MustCompile(`watching config for changes`))
	from = g.logLen()
	toFIFO()
	g.waitLog(t, from, failed)

	if r := mustSend(t, newTestClient(t), "GET", g.base+"/"); r.status != 200 {
		t.Errorf("after the failed reloads: got %d, want 200 from the old config", r.status)
	}
}

// TestServeTrustsAnIPv4MappedProxyPrefix: client addresses are compared
// unmapped, so ::ffff:127.0.0.0/104 must trust the loopback peer like
// 127.0.0.0/8 does: each forwarded client then has its own per-IP bucket.
func TestServeTrustsAnIPv4MappedProxyPrefix(t *testing.T) {
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	t.Setenv("GATEWAY_SERVER_TRUSTED_PROXIES", "::ffff:127.0.0.0/104")
	g := startGateway(t, "gateway", copyDefaultConfig(t))
	c := newTestClient(t)
	for i := range 11 {
		r := mustSend(t, c, "GET", g.base+"/", "X-Forwarded-For", "203.0.113.1")
		if want := map[bool]int{true: 200, false: 429}[i < 10]; r.status != want {
			t.Fatalf("client 203.0.113.1, request %d: got %d, want %d (10 a minute per IP)", i+1, r.status, want)
		}
	}
	if r := mustSend(t, c, "GET", g.base+"/", "X-Forwarded-For", "203.0.113.2"); r.status != 200 {
		t.Errorf("client 203.0.113.2, first request: got %d, want 200 (its own bucket: the forwarded address was believed)", r.status)
	}
}
