package redislimit

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// NewRedisClient against real servers: standalone with a password, TLS with
// a private CA, Sentinel, and Cluster.
func TestNewRedisClientAgainstRedis(t *testing.T) {
	ping := func(t *testing.T, c redis.UniversalClient) error {
		t.Helper()
		return c.Ping(t.Context()).Err()
	}

	t.Run("standalone with password", func(t *testing.T) {
		s := redistest.StartWithArgs(t, "--requirepass", "s3cret")
		good, err := redisclient.New(redisclient.Options{Addrs: []string{"redis://" + s.Addr()}, Password: "s3cret", Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer good.Close()
		if _, ok := good.(*redis.Client); !ok {
			t.Fatalf("got %T, want *redis.Client", good)
		}
		if err := ping(t, good); err != nil {
			t.Fatalf("PING with the password: %v", err)
		}
		bad, err := redisclient.New(redisclient.Options{Addrs: []string{s.Addr()}, Password: "wrong", Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		if err := ping(t, bad); err == nil {
			t.Fatal("PING with a wrong password: got no error, want one")
		}
	})

	t.Run("rediss with a private CA", func(t *testing.T) {
		s, pool := redistest.StartTLS(t)
		c, err := redisclient.New(redisclient.Options{Addrs: []string{"rediss://" + s.Addr()}, TLSConfig: &tls.Config{RootCAs: pool}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := ping(t, c); err != nil {
			t.Fatalf("PING over TLS: %v", err)
		}
		r := newTestRedis(t, c, Config{})
		if d := decideOne(t, r, limiter.Check{Rule: policy("tls", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 1, Period: time.Minute}, Key: "k"}); !d.Allowed {
			t.Fatalf("decision over TLS: got denied (reason %d), want admitted", d.Reason)
		}
		// Without the CA the server's certificate is not trusted.
		untrusting, err := redisclient.New(redisclient.Options{Addrs: []string{"rediss://" + s.Addr()}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer untrusting.Close()
		if err := ping(t, untrusting); err == nil {
			t.Fatal("PING over TLS without the CA: got no error, want a certificate error")
		}
	})

	t.Run("sentinel", func(t *testing.T) {
		master := redistest.Start(t)
		sentinel := redistest.StartSentinel(t, master, "mymaster")
		c, err := redisclient.New(redisclient.Options{SentinelMasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr()}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Set(t.Context(), "via-sentinel", "1", 0).Err(); err != nil {
			t.Fatalf("SET through sentinel: %v", err)
		}
		if got, err := redistest.Do(master.Addr(), "GET", "via-sentinel"); err != nil || got != "1" {
			t.Fatalf("GET on the master: got %q, %v, want \"1\"", got, err)
		}
	})
}
