package limiter_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// The process builds one Redis client at start, shares it with every
// snapshot, and closes it once at shutdown.
func ExampleNewRedis() {
	client, err := limiter.NewRedisClient(limiter.RedisClientOptions{
		Addrs:   []string{"127.0.0.1:6379"}, // several addresses: Redis Cluster
		Timeout: 30 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	local := limiter.NewLocal(0)
	shared, err := limiter.NewRedis(client, limiter.RedisConfig{Local: local, Logger: slog.Default()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shared.Close() // runs before client.Close
	engine, err := limiter.NewEngine(time.Now, local, shared)
	if err != nil {
		fmt.Println(err)
		return
	}
	tenantRPM := &limiter.Rule{Name: "tenant-rpm", Algorithm: limiter.GCRA, OnRedisError: limiter.FailLocal, LocalShare: 0.34}
	v, err := engine.Decide(context.Background(), []limiter.Check{
		{Rule: tenantRPM, Limit: limiter.Limit{Rate: 60, Period: time.Minute}, Key: "acme"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(v.Allowed)
}
