package redisclient

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A connection that takes longer to make than a decision's timeout is still
// made for a caller that may wait longer: the breaker's probe (half a
// cooldown) and the direct checks (a cooldown). A dial bounded by the
// decision timeout failed every such call with an i/o timeout whenever
// connecting took more than 30 ms, which a gateway whose cores are busy
// answering a flood by the failure modes does right after Redis comes back:
// the probe failed against a healthy Redis and enforcement stayed off for
// another cooldown.
//
// The slow connection here is a TLS handshake whose server is slow to
// answer (each reply held 100 ms by a proxy): the dial, handshake included,
// takes at least that, whatever the machine's load.
func TestDialOutlastsTheDecisionTimeout(t *testing.T) {
	s, pool := redistest.StartTLS(t)
	slow := redistest.StartDelayProxy(t, s.Addr())
	slow.SetDelay(100 * time.Millisecond)
	// Each call on a client of its own, so each makes its connection.
	client := func() redis.UniversalClient {
		c, err := New(Options{
			Addrs:     []string{slow.Addr()},
			TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
			Timeout:   30 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// A caller with the decision timeout gives up at its deadline: the
	// dial goes on without it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	err := client().Ping(ctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING within 30 ms through a 100 ms handshake: got an answer, want a timeout")
	}

	// A caller that may wait a second gets its answer.
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := client().Ping(ctx).Err(); err != nil {
		t.Fatalf("PING within 1 s through a 100 ms handshake on a client whose decision timeout is 30 ms: %v", err)
	}
}
