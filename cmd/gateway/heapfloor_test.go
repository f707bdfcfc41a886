package main

import (
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
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

// server.memory_limit_bytes sets the runtime's soft limit for the life of
// the gateway, before the heap floor, which then lowers itself to half of
// it: the floor never makes the runtime work against the limit.
func TestServeMemoryLimit(t *testing.T) {
	config := func(t *testing.T, limit string) string {
		return writePressureConfig(t, fmt.Sprintf(`
server: {listen: 127.0.0.1:0, memory_limit_bytes: %s}
routes:
  - {name: r, match: {path_prefix: /}, upstream: "builtin:echo"}
`, limit))
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("test process runs with a memory limit of %d, want none", got)
	}
	t.Run("set", func(t *testing.T) {
		g := startGateway(t, "gateway", config(t, "104857600"))
		g.waitLog(t, 0, regexp.MustCompile(`msg="memory limit" bytes=104857600 from=server.memory_limit_bytes`))
		g.waitLog(t, 0, regexp.MustCompile(`msg="heap floor" bytes=52428800 setting=67108864`))
		if got := debug.SetMemoryLimit(-1); got != 100<<20 {
			t.Fatalf("memory limit while serving: got %d, want %d", got, 100<<20)
		}
		g.stop()
		<-g.done
		if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
			t.Fatalf("memory limit once the gateway stopped: got %d, want none", got)
		}
	})
	t.Run("none", func(t *testing.T) {
		g := startGateway(t, "gateway", config(t, "-1"))
		g.waitLog(t, 0, regexp.MustCompile(`msg="memory limit" bytes=0 from=none`))
		g.waitLog(t, 0, regexp.MustCompile(`msg="heap floor" bytes=67108864 setting=67108864`))
		if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
			t.Fatalf("memory limit with -1: got %d, want none", got)
		}
	})
	t.Run("GOMEMLIMIT set", func(t *testing.T) {
		// The runtime read GOMEMLIMIT when this process started (it had
		// none); the gateway leaves the runtime's limit as it is.
		t.Setenv("GOMEMLIMIT", "off")
		g := startGateway(t, "gateway", config(t, "104857600"))
		g.waitLog(t, 0, regexp.MustCompile(`msg="memory limit" bytes=9223372036854775807 from=GOMEMLIMIT`))
		if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
			t.Fatalf("memory limit with GOMEMLIMIT in the environment: got %d, want the runtime's own", got)
		}
	})
}
