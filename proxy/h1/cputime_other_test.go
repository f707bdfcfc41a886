//go:build !linux

package h1_test

import "time"

// threadClock is the wall clock where a thread's CPU time is not read.
func threadClock() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// processClock is the wall clock where the process's CPU time is not read.
func processClock() func() time.Duration { return threadClock() }
