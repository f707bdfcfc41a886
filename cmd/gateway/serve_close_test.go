package main

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestServeReleasesWhatItBuiltWhenTheStartFails: a start that fails once
// the builtin upstream, the Redis client and the shared limiter exist
// releases them through the one close path: it leaves no goroutine and no
// open file (the builtin upstream's listener; the Redis client has not
// dialled yet, so its release shows in neither).
func TestServeReleasesWhatItBuiltWhenTheStartFails(t *testing.T) {
	up := redistest.Start(t)
	secured := redistest.StartWithArgs(t, "--requirepass", "right-password")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	tests := []struct {
		name string
		env  map[string]string
		want string // in the exit message
	}{
		{"listen address in use", map[string]string{
			"GATEWAY_REDIS_ADDRS": up.Addr(), "GATEWAY_SERVER_LISTEN": busy.Addr().String()},
			"gateway: listening on " + busy.Addr().String() + ": "},
		{"redis refuses the credentials", map[string]string{
			"GATEWAY_REDIS_ADDRS": secured.Addr(), "GATEWAY_REDIS_PASSWORD": "wrong", "GATEWAY_SERVER_LISTEN": "127.0.0.1:0"},
			"redis.password: redis at " + secured.Addr() + " refused the credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := writeRedisConfig(t)
			leaks := goleak.IgnoreCurrent()
			fds, counted := openFiles()
			var out strings.Builder
			code := run(context.Background(), []string{"serve", "-config", path}, io.Discard, &out)
			if code != 1 || !strings.Contains(out.String(), tt.want) {
				t.Fatalf("got exit %d, output:\n%s\nwant exit 1 and %q", code, out.String(), tt.want)
			}
			goleak.VerifyNone(t, leaks)
			if got, _ := openFiles(); counted && got > fds {
				t.Errorf("got %d open files after the failed start, want at most the %d before it", got, fds)
			}
		})
	}
}

// openFiles counts the process's open file descriptors where the system
// lists them (Linux); ok is false elsewhere.
func openFiles() (n int, ok bool) {
	fds, err := os.ReadDir("/proc/self/fd")
	return len(fds), err == nil
}
