package redislock_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/redislock"
	"github.com/redis/go-redis/v9"
)

// Resource names are user data: whatever they hold, only fixed-size hex
// digests under one hash tag reach Redis.
func TestHostileResourceNeverReachesRedis(t *testing.T) {
	_, client, l := newLocker(t, redislock.Config{ManualRenewal: true})
	hostile := []string{
		"a{b}c",
		"x\r\nSET pwned 1\r\n",
		"}{",
		strings.Repeat("z", 1<<20),
		"\x00\xff",
	}
	for _, r := range hostile {
		mustAcquire(t, l, r, time.Minute)
	}
	keys, err := client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	if len(keys) != 2*len(hostile) {
		t.Fatalf("keys: got %d %q, want %d (a lock and a counter per resource)", len(keys), keys, 2*len(hostile))
	}
	shape := regexp.MustCompile(`^lock:\{[0-9a-f]{32}\}(:fence)?$`)
	for _, k := range keys {
		if !shape.MatchString(k) {
			t.Errorf("key %q: want lock:{<32 hex>} or lock:{<32 hex>}:fence", k)
		}
	}
}

// Config.FenceTTL bounds how long a resource's counter outlives its last
// acquisition; by default it never expires, so tokens never go back.
func TestFenceTTL(t *testing.T) {
	tests := []struct {
		name     string
		fenceTTL time.Duration
		lockTTL  time.Duration
		min, max time.Duration // PTTL of the counter; -1: no expiry
	}{
		{"zero: never expires", 0, time.Second, -1, -1},
		{"an hour", time.Hour, time.Second, 59 * time.Minute, time.Hour},
		{"never shorter than the lock", time.Millisecond, time.Minute, 59 * time.Second, time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, client, l := newLocker(t, redislock.Config{FenceTTL: tc.fenceTTL, ManualRenewal: true})
			mustAcquire(t, l, "r", tc.lockTTL)
			keys, err := client.Keys(context.Background(), "*:fence").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("KEYS *:fence: got %q, %v; want one key", keys, err)
			}
			pttl, err := client.PTTL(context.Background(), keys[0]).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			if tc.min < 0 {
				if pttl >= 0 {
					t.Fatalf("counter PTTL: got %s, want no expiry", pttl)
				}
				return
			}
			if pttl < tc.min || pttl > tc.max {
				t.Fatalf("counter PTTL: got %s, want in [%s, %s]", pttl, tc.min, tc.max)
			}
		})
	}
}

// Bad arguments get a clear error and touch nothing.
func TestBadInput(t *testing.T) {
	if _, err := redislock.New(nil, redislock.Config{}); err == nil {
		t.Errorf("New(nil client): got nil error, want one")
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	for _, cfg := range []redislock.Config{{Timeout: -time.Second}, {FenceTTL: -time.Second}} {
		if _, err := redislock.New(client, cfg); err == nil {
			t.Errorf("New(%+v): got nil error, want one", cfg)
		}
	}
	l, err := redislock.New(client, redislock.Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tests := []struct {
		name     string
		resource string
		ttl      time.Duration
	}{
		{"empty resource", "", time.Second},
		{"zero ttl", "r", 0},
		{"negative ttl", "r", -time.Second},
		{"ttl under a millisecond", "r", 999 * time.Microsecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lk, err := l.Acquire(context.Background(), tc.resource, tc.ttl)
			if err == nil || lk != nil {
				t.Fatalf("Acquire(%q, %s): got %v, %v; want an error and no lock", tc.resource, tc.ttl, lk, err)
			}
		})
	}
}
