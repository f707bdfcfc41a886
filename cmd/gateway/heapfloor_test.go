package main

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/heaptest"
)

// server.min_heap_bytes raises GOGC while the gateway runs and gives it back
// when it stops; -1 and a GOGC in the environment leave Go's own rule.
func TestServeMinHeapBytes(t *testing.T) {
	config := func(t *testing.T, floor string) string {
		return writePressureConfig(t, fmt.Sprintf(`
server: {listen: 127.0.0.1:0, min_heap_bytes: %s}
routes:
  - {name: r, match: {path_prefix: /}, upstream: "builtin:echo"}
`, floor))
	}
	stopped := func(t *testing.T, g *gateway) {
		t.Helper()
		g.stop()
		<-g.done
		if got := heaptest.GOGC(t); got != 100 {
			t.Fatalf("GOGC %d once the gateway stopped, want 100", got)
		}
	}
	if got := heaptest.GOGC(t); got != 100 {
		t.Fatalf("test process runs with GOGC %d, want 100", got)
	}

	t.Run("floor", func(t *testing.T) {
		g := startGateway(t, "gateway", config(t, "1073741824"))
		// 1 GiB over a test process's few MB live: the cap, 1 GiB / 4 MB.
		if got := heaptest.GOGC(t); got <= 100 {
			t.Fatalf("GOGC %d with a 1 GiB floor, want it raised", got)
		}
		stopped(t, g)
	})
	t.Run("off", func(t *testing.T) {
		g := startGateway(t, "gateway", config(t, "-1"))
		if got := heaptest.GOGC(t); got != 100 {
			t.Fatalf("GOGC %d with min_heap_bytes -1, want 100", got)
		}
		stopped(t, g)
	})
	t.Run("GOGC set", func(t *testing.T) {
		t.Setenv("GOGC", "100")
		g := startGateway(t, "gateway", config(t, "1073741824"))
		g.waitLog(t, 0, regexp.MustCompile(`GOGC is set: server.min_heap_bytes does not apply`))
		if got := heaptest.GOGC(t); got != 100 {
			t.Fatalf("GOGC %d with GOGC in the environment, want 100", got)
		}
		stopped(t, g)
	})
}
