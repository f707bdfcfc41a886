//go:build !linux

package stat

import "time"

// ThreadClock is the wall clock where a thread's CPU time is not read.
func ThreadClock() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// ProcessClock is the wall clock where the process's CPU time is not read.
func ProcessClock() func() time.Duration { return ThreadClock() }
