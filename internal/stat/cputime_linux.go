package stat

import (
	"syscall"
	"time"
)

// ThreadClock reads the CPU time of the calling thread, so that a serial
// benchmark loop on a busy machine counts the time it ran, not the time
// it waited for a core. The caller holds its thread (runtime.LockOSThread).
func ThreadClock() func() time.Duration { return rusageClock(1) } // RUSAGE_THREAD

// ProcessClock reads the CPU time of the whole process: every goroutine's,
// the garbage collector's too, which a server's work spreads over.
func ProcessClock() func() time.Duration { return rusageClock(0) } // RUSAGE_SELF

// rusageClock reads getrusage(who)'s user and system time; 0 if it fails.
func rusageClock(who int) func() time.Duration {
	return func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
}
