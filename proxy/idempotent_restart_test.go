package proxy

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
)

// A payment is upstream and 40 duplicates wait for it (on_conflict: wait)
// when Redis, without persistence, is killed and restarted: the lock and the
// fencing counter are gone, and a waiter takes the key again. Its fencing
// token must be larger than the first one's, so that the upstream, which
// refuses tokens below the largest it has seen, can tell the stale holder.
func TestIdempotentFenceAcrossRedisRestart(t *testing.T) {
	s := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	store, err := idempotency.NewRedis(client, idempotency.RedisConfig{Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	up := newPayments()
	up.hold = make(chan struct{})
	base, _ := idemGateway(t, up, store, true, 10*time.Second)
	c := clienttest.New(t, 48)

	const duplicates = 40
	var wg sync.WaitGroup
	send := func() {
		wg.Go(func() { _, _ = tryDo(c, http.MethodPost, base+"/pay", `{"amount":7}`, payHeader("order-r")) })
	}
	defer wg.Wait()
	opened := false
	defer func() {
		if !opened {
			close(up.hold)
		}
	}()
	send()
	var first int64
	select {
	case first = <-up.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the upstream")
	}
	for range duplicates {
		send()
	}
	s.Restart()
	send() // one more after the restart, in case every waiter met a broken connection
	var second int64
	select {
	case second = <-up.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no duplicate took the key after the restart")
	}
	close(up.hold)
	opened = true
	if second <= first {
		t.Fatalf("fence after the restart: got %d, first holder's %d; want larger (the upstream cannot refuse the stale holder)", second, first)
	}
	t.Logf("fence before the restart %d, after %d", first, second)
}
