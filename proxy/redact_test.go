package proxy

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// An upstream failure is logged with the upstream and the error, and
// neither carries the client's query values.
func TestUpstreamFailureLogIsRedacted(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   closingTransport
	}{{"standard", timerTransport()}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			snap := testSnapshot(t, nil, testRoute(t, "closed", "/", closedURL(t)))
			gw, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{transport: tc.tr})
			h.log = slog.New(slog.NewTextHandler(&logs, nil))
			r := do(t, http.DefaultClient, http.MethodGet, gw.URL+"/x?token=tok-s3cret", nil, nil)
			if r.status != http.StatusBadGateway {
				t.Fatalf("status %d, want 502", r.status)
			}
			logs.mu.Lock()
			out := logs.buf.String()
			logs.mu.Unlock()
			if !strings.Contains(out, "upstream=") || strings.Contains(out, "s3cret") {
				t.Errorf("log: got\n%s\nwant the failure logged without the query's values", out)
			}
		})
	}
}
