package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// StartSentinel starts a Redis Sentinel on a free loopback port that
// monitors master under name (quorum 1) and waits until it answers PING.
func StartSentinel(t TB, master *Server, name string) *Server {
	t.Helper()
	return start(t, func(s *Server) ([]string, error) {
		// Sentinel rewrites its config file, so each start writes a fresh one.
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n",
			s.port, s.dir, name, master.Port())
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		return []string{conf, "--sentinel", "--port", strconv.Itoa(s.port)}, nil
	}, false, nil)
}
