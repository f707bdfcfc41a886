package redislimit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

func TestRedisLibraryLoggerThrottles(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	logs := &logCounter{}
	l := NewLibraryLogger(slog.New(logs))
	l.clock = clock.Now
	for i := 0; i < 50; i++ {
		l.Printf(context.Background(), "dial %d failed", i)
	}
	clock.Advance(time.Second)
	l.Printf(context.Background(), "dial again")
	got := logs.messages()
	want := []string{"go-redis: dial 0 failed", "go-redis: dial again"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got lines %q, want %q", got, want)
	}
	// It fits go-redis's process-wide logger hook (checked at compile time).
	var _ = func() { redis.SetLogger(l) }
}
