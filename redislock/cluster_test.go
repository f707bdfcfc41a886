package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/redislock"
	"github.com/redis/go-redis/v9"
)

// On a 3-master Redis Cluster each lock's two keys share a hash tag, so the
// acquire script (lock and fencing counter) runs on one slot; resources
// spread over the masters. Every lesson rule holds there too.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := redislock.New(client, redislock.Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	const resources = 30
	for i := range resources {
		resource := fmt.Sprintf("order:%d", i)
		first := mustAcquire(t, l, resource, 100*time.Millisecond) // watchdog on
		wantNotAcquired(t, l, resource)
		if err := first.Release(ctx); err != nil {
			t.Fatalf("%s: Release: got %v, want nil", resource, err)
		}
		second := mustAcquire(t, l, resource, time.Second)
		if second.Fence() <= first.Fence() {
			t.Fatalf("%s: fence got %d after %d, want larger", resource, second.Fence(), first.Fence())
		}
		if err := second.Release(ctx); err != nil {
			t.Fatalf("%s: Release: got %v, want nil", resource, err)
		}
		if err := second.Release(ctx); !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("%s: second Release: got %v, want ErrNotHeld", resource, err)
		}
	}
	// The resources are spread over every master, not piled on one.
	for _, s := range c.Servers {
		n, err := s.Do("DBSIZE")
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", s.Addr(), err)
		}
		if n == "0" {
			t.Errorf("master %s holds no fencing counter of %d resources, want resources spread over all masters", s.Addr(), resources)
		}
	}
}
