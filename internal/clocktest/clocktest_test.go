package clocktest_test

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	c := clocktest.New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("New: got %v, want %v", got, start)
	}
	c.Advance(1500 * time.Millisecond)
	if got, want := c.Now(), start.Add(1500*time.Millisecond); got != want {
		t.Errorf("Advance: got %v, want %v", got, want)
	}
	c.Advance(-time.Second)
	if got, want := c.Now(), start.Add(500*time.Millisecond); got != want {
		t.Errorf("Advance back: got %v, want %v", got, want)
	}
	c.Set(start.Add(time.Hour))
	if got, want := c.Now(), start.Add(time.Hour); got != want {
		t.Errorf("Set: got %v, want %v", got, want)
	}
}
