package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// StartSentinel starts a Redis Sentinel on a free loopback port that
// monitors master under name (quorum 1) and waits until it answers PING.
func StartSentinel(t TB, master *Server, name string) *Server {
	t.Helper()
	return StartSentinelWith(t, master, name, SentinelOptions{})
}

// SentinelOptions tunes StartSentinelWith. The zero value is
// StartSentinel's: quorum 1 and Sentinel's own timings.
type SentinelOptions struct {
	// Quorum is how many sentinels must agree the master is down; zero
	// means 1.
	Quorum int
	// DownAfter is down-after-milliseconds; zero keeps Sentinel's 30s.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout; zero keeps Sentinel's 3m.
	FailoverTimeout time.Duration
}

// StartSentinelWith is StartSentinel tuned by o.
func StartSentinelWith(t TB, master *Server, name string, o SentinelOptions) *Server {
	t.Helper()
	quorum := max(1, o.Quorum)
	return start(t, func(s *Server) ([]string, error) {
		// Sentinel rewrites its config file, so each start writes a fresh one.
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nsentinel monitor %s 127.0.0.1 %d %d\n",
			s.port, s.dir, name, master.Port(), quorum)
		if o.DownAfter > 0 {
			body += fmt.Sprintf("sentinel down-after-milliseconds %s %d\n", name, o.DownAfter.Milliseconds())
		}
		if o.FailoverTimeout > 0 {
			body += fmt.Sprintf("sentinel failover-timeout %s %d\n", name, o.FailoverTimeout.Milliseconds())
		}
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		return []string{conf, "--sentinel", "--port", strconv.Itoa(s.port)}, nil
	}, false, nil)
}
