package proxy

import (
	"syscall"
	"time"
)

// threadClock reads the CPU time of the calling thread, so that a serial
// benchmark loop on a busy machine counts the time it ran, not the time
// it waited for a core. The caller holds its thread (runtime.LockOSThread).
func threadClock() func() time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD
	return func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(rusageThread, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
}

// processClock reads the CPU time of the whole process: every goroutine's,
// the garbage collector's too, which a server's work spreads over.
func processClock() func() time.Duration {
	const rusageSelf = 0 // RUSAGE_SELF
	return func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(rusageSelf, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
}
