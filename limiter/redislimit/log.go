package redislimit

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// LibraryLogger carries go-redis's own log lines (it writes one per
// failed dial, among others) to slog, at most one line per second with a
// count of the lines held back, so that a Redis outage under load does not
// flood the log. go-redis's logger is process-wide: install it once at start
// with redis.SetLogger(redislimit.NewLibraryLogger(log)). It is safe for
// concurrent use.
type LibraryLogger struct {
	log      *slog.Logger
	clock    func() time.Time
	throttle logThrottle
}

// NewLibraryLogger returns a RedisLibraryLogger writing to l; nil means
// slog.Default().
func NewLibraryLogger(l *slog.Logger) *LibraryLogger {
	if l == nil {
		l = slog.Default()
	}
	return &LibraryLogger{log: l, clock: time.Now}
}

// Printf implements go-redis's logging interface.
func (l *LibraryLogger) Printf(ctx context.Context, format string, v ...any) {
	if n, ok := l.throttle.allow(l.clock()); ok {
		l.log.WarnContext(ctx, "go-redis: "+fmt.Sprintf(format, v...), "suppressed", n)
	}
}
