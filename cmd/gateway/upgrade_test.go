package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestShutdownCutsUpgradedConnections: on SIGTERM (here: the run's context
// ending) an upgraded connection keeps working through the drain, is cut at
// server.shutdown_timeout, and the log says how many were cut.
func TestShutdownCutsUpgradedConnections(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(conn, brw)
	}))
	defer up.Close()
	cfg := fmt.Sprintf(`server: {listen: "127.0.0.1:0", shutdown_timeout: 300ms}
routes:
  - {name: ws, match: {path_prefix: /}, upstream: "%s", upgrades: [echo]}
`, up.URL)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &gateway{name: "gateway", log: newGatewayLog(t, "gateway"), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer close(g.done)
		g.code = run(ctx, []string{"serve", "-config", path}, io.Discard, g.log)
	}()
	addr := g.waitLog(t, 0, listeningLine)[1]

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: "+addr+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: got %v %v, want 101", resp, err)
	}
	echo := func(line string) error {
		if _, err := io.WriteString(conn, line); err != nil {
			return err
		}
		got, err := br.ReadString('\n')
		if err == nil && got != line {
			err = fmt.Errorf("got %q, want %q", got, line)
		}
		return err
	}
	if err := echo("before\n"); err != nil {
		t.Fatalf("echo before shutdown: %v", err)
	}

	from := g.logLen()
	cancel() // what SIGTERM does
	g.waitLog(t, from, regexp.MustCompile(`shutting down`))
	if err := echo("draining\n"); err != nil {
		t.Fatalf("echo during the drain: %v (want the connection to work until the deadline)", err)
	}
	g.waitLog(t, from, regexp.MustCompile(`closed upgraded connections still open" connections=1`))
	if _, err := br.ReadString('\n'); err == nil || !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Errorf("client read after the cut: got %v, want the connection closed", err)
	}
	select {
	case <-g.done:
		if g.code != 0 {
			t.Errorf("serve exited %d, want 0", g.code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the drain")
	}
}
