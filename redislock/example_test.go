package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-gateway/gateway/redislock"
	"github.com/redis/go-redis/v9"
)

// A payment callback that may arrive twice is handled once at a time: the
// second delivery finds the lock held. The work runs under the lock's
// Context, which ends if the lock is lost, and carries the fencing token to
// the database, whose unique constraint stays the last guard.
func ExampleLocker_Acquire() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	locks, err := redislock.New(client, redislock.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	lock, err := locks.Acquire(ctx, "pay-callback:order-1001", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx) // stops the watchdog, deletes only our own lock

	_, err = locks.Acquire(ctx, "pay-callback:order-1001", 30*time.Second)
	fmt.Println("duplicate delivery:", errors.Is(err, redislock.ErrNotAcquired))

	// The work: stop if lock.Context() ends; write with lock.Fence().
	work := lock.Context()
	fmt.Println("holding the lock:", work.Err() == nil, "with a fencing token:", lock.Fence() > 0)
	// Output:
	// duplicate delivery: true
	// holding the lock: true with a fencing token: true
}
