package redislimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
)

// redisAddr is a real redis-server for the examples, started by TestMain.
var redisAddr string

func TestMain(m *testing.M) { os.Exit(redistest.RunWithServer(m, &redisAddr)) }

// Three gateway instances that point at one Redis enforce one limit
// together. The process builds one Redis client at start, shares it with
// every config reload, and closes it once at shutdown.
func ExampleNew() {
	client, err := redisclient.New(redisclient.Options{
		Addrs:   []string{redisAddr}, // several addresses: Redis Cluster
		Timeout: 30 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	local := limiter.NewLocal(0)
	shared, err := redislimit.New(client, redislimit.Config{Logger: slog.Default()})
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
	for range 3 {
		v, err := engine.Decide(context.Background(), []limiter.Check{
			{Rule: tenantRPM, Limit: limiter.Limit{Rate: 2, Period: time.Minute}, Key: "acme"},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		d, _ := v.Deciding()
		fmt.Printf("allowed=%v remaining=%d\n", v.Allowed, d.Remaining)
	}
	// Output:
	// allowed=true remaining=1
	// allowed=true remaining=0
	// allowed=false remaining=0
}
