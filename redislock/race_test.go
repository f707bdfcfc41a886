package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/redislock"
)

// 64 goroutines race for one resource, round after round: exactly one wins
// each round, and the winners' fencing tokens strictly increase.
func TestRaceOneWinnerPerRound(t *testing.T) {
	_, _, l := newLocker(t, redislock.Config{ManualRenewal: true})
	const (
		racers = 64
		rounds = 20
	)
	var lastFence int64
	for round := range rounds {
		start := make(chan struct{})
		locks := make(chan *redislock.Lock, racers)
		errs := make(chan error, racers)
		var wg sync.WaitGroup
		for range racers {
			wg.Go(func() {
				<-start
				lk, err := l.Acquire(context.Background(), "flash-sale", 5*time.Second)
				switch {
				case err == nil:
					locks <- lk
				case !errors.Is(err, redislock.ErrNotAcquired):
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(locks)
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: Acquire: got %v, want a lock or ErrNotAcquired", round, err)
		}
		var winners []*redislock.Lock
		for lk := range locks {
			winners = append(winners, lk)
		}
		if len(winners) != 1 {
			for _, lk := range winners {
				_ = lk.Release(context.Background())
			}
			t.Fatalf("round %d: got %d winners, want exactly 1", round, len(winners))
		}
		w := winners[0]
		if w.Fence() <= lastFence {
			t.Fatalf("round %d: fence got %d after %d, want strictly larger", round, w.Fence(), lastFence)
		}
		lastFence = w.Fence()
		if err := w.Release(context.Background()); err != nil {
			t.Fatalf("round %d: Release: got %v, want nil", round, err)
		}
	}
}
