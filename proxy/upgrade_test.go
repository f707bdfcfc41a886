package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
)

// echoUpgradeUpstream switches to a line echo protocol on "Upgrade: echo"
// and echoes until the gateway closes its side.
func echoUpgradeUpstream(t *testing.T) string {
	t.Helper()
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "echo") {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(conn, brw) // until the gateway closes
	}))
	return up.URL
}

// upgradedClient opens an upgraded connection through the gateway and checks
// that it echoes.
func upgradedClient(t *testing.T, gwURL string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, br, _ := upgrade(t, gwURL)
	echoLine(t, conn, br, "ping\n")
	return conn, br
}

// upgrade asks the gateway for an upgrade to the echo protocol and reads
// its 101.
func upgrade(t *testing.T, gwURL string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	addr := strings.TrimPrefix(gwURL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: "+addr+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("reading the upgrade response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: got status %d, want 101", resp.StatusCode)
	}
	return conn, br, resp
}

func echoLine(t *testing.T, conn net.Conn, br *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(conn, line); err != nil {
		t.Fatalf("writing on the upgraded connection: %v", err)
	}
	got, err := br.ReadString('\n')
	if err != nil || got != line {
		t.Fatalf("echo: got (%q, %v), want %q", got, err, line)
	}
}

// TestShutdownUpgradedConnections: Shutdown waits for upgraded connections
// while they work and end by themselves, and cuts (and counts) the ones
// still open when its deadline passes.
func TestShutdownUpgradedConnections(t *testing.T) {
	up := echoUpgradeUpstream(t)
	ws := testRoute(t, "ws", "/", up)
	ws.Upgrades = []string{"echo"}
	snap := testSnapshot(t, nil, ws)

	t.Run("cut at the deadline", func(t *testing.T) {
		gw, h := newGateway(t, snap, fakeLimiter{}, gatewayOpts{})
		conn, br := upgradedClient(t, gw.URL)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the drain time is over
		if cut := h.Shutdown(ctx); cut != 1 {
			t.Errorf("Shutdown: cut %d connections, want 1", cut)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if b, err := br.ReadByte(); err == nil {
			t.Errorf("client read after the cut: got %q, want the connection closed", b)
		}
	})

	t.Run("waits while the connection works", func(t *testing.T) {
		gw, h := newGateway(t, snap, fakeLimiter{}, gatewayOpts{})
		conn, br := upgradedClient(t, gw.URL)
		done := make(chan int, 1)
		go func() { done <- h.Shutdown(context.Background()) }()
		echoLine(t, conn, br, "still here\n") // the drain does not stop traffic
		select {
		case cut := <-done:
			t.Fatalf("Shutdown returned (cut %d) with the connection still open", cut)
		default:
		}
		conn.Close()
		select {
		case cut := <-done:
			if cut != 0 {
				t.Errorf("Shutdown: cut %d, want 0 (the client closed)", cut)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Shutdown did not return after the upgraded connection closed")
		}
	})
}

// TestUpgradeCarriesRateLimitHeaders: a 101 through a limited route carries
// the gateway's rate-limit headers, as any other answer. ReverseProxy writes
// a 101 from the header map itself, where fields set apart from it
// (h1.SetFields) would be lost: the lean server hands upgrades to net/http,
// whose writer SetFields refuses.
func TestUpgradeCarriesRateLimitHeaders(t *testing.T) {
	up := echoUpgradeUpstream(t)
	ws := testRoute(t, "ws", "/", up, testPolicy(t, "per-ip", "ip", perMinute(5, 5), policies.MissingReject))
	ws.Upgrades = []string{"echo"}
	snap := testSnapshot(t, nil, ws)
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	conn, br, resp := upgrade(t, gw.URL)
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "4" {
		t.Errorf("X-RateLimit-Remaining %q, want 4 (header %v)", got, resp.Header)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"per-ip";r=4;`) {
		t.Errorf("RateLimit %q (header %v)", got, resp.Header)
	}
	echoLine(t, conn, br, "ping\n")
}
