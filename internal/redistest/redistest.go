// Package redistest starts real redis-server processes for tests: one server
// on a free loopback port, or a three-master Redis Cluster, each cleaned up
// when the test ends. Servers keep no data on disk (no RDB, no AOF), so a
// restart forgets everything, as a real restart without persistence does.
package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// InstallHint is what to run when redis-server is missing.
const InstallHint = "apt-get install -y redis-server"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process listening on 127.0.0.1. Its methods
// may be called from the test's goroutines; mu guards the process.
type Server struct {
	t    TB
	port int
	dir  string
	argv func(s *Server) ([]string, error) // the redis-server arguments

	tls *tls.Config // set when the server speaks TLS only

	mu   sync.Mutex
	cmd  *exec.Cmd
	logf *os.File
}

// Start starts redis-server on a free loopback port and waits until it
// answers PING. The server is killed when the test ends. A missing
// redis-server fails the test with the command that installs it.
func Start(t TB) *Server {
	t.Helper()
	return start(t, serverArgs(nil), false, nil)
}

// StartWithArgs is Start with extra redis-server arguments, such as
// "--requirepass", "secret".
func StartWithArgs(t TB, args ...string) *Server {
	t.Helper()
	return start(t, serverArgs(args), false, nil)
}

// serverArgs returns the arguments of a data server with no persistence.
func serverArgs(extra []string) func(s *Server) ([]string, error) {
	return func(s *Server) ([]string, error) {
		args := []string{
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", s.dir,
			"--daemonize", "no",
		}
		return append(args, extra...), nil
	}
}

func start(t TB, argv func(s *Server) ([]string, error), clusterBus bool, tlsCfg *tls.Config) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found on PATH; install it with: %s", InstallHint)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(clusterBus)
		if err != nil {
			t.Fatalf("redistest: finding a free port: %v", err)
		}
		s := &Server{t: t, port: port, dir: t.TempDir(), argv: argv, tls: tlsCfg}
		if lastErr = s.launch(); lastErr == nil {
			t.Cleanup(s.cleanup)
			return s
		}
		// Another process may have taken the port between our probe and the
		// server's bind: try another one.
	}
	t.Fatalf("redistest: starting redis-server: %v", lastErr)
	return nil
}

// freePort returns a loopback port that is free now; with clusterBus, the
// port 10000 above it (Redis Cluster's bus) is free too.
func freePort(clusterBus bool) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !clusterBus {
			l.Close()
			return port, nil
		}
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair")
}

// launch starts the process and waits for PING. It is called with the
// process not running.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args, err := s.argv(s)
	if err != nil {
		logf.Close()
		return err
	}
	cmd := exec.Command("redis-server", args...)
	// Files, not pipes: os/exec then starts no copying goroutines.
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.cmd, s.logf = cmd, logf
	if err := waitPing(s.Addr(), s.tls, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		s.cmd = nil
		logf.Close()
		return fmt.Errorf("%w; log:\n%s", err, tail(filepath.Join(s.dir, "redis.log")))
	}
	return nil
}

// waitPing polls until addr answers PING, the process died, or the start
// timeout passed.
func waitPing(addr string, tlsCfg *tls.Config, pid int) error {
	deadline := time.Now().Add(startTimeout)
	backoff := time.Millisecond
	for {
		reply, err := do(addr, tlsCfg, "PING")
		if err == nil && reply == "PONG" || err != nil && strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil // answering; with requirepass it answers NOAUTH
		}
		if exited(pid) {
			return fmt.Errorf("redis-server on %s exited", addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %s: %v", addr, startTimeout, err)
		}
		time.Sleep(backoff) // polling an external process: there is no event to wait on
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// exited reports whether pid is a zombie or gone (Linux /proc; elsewhere the
// start timeout catches it).
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Pid returns the running server's process id (0 when it is not running).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill ends the server with SIGKILL and waits for it: connections drop, state
// is lost. Killing a stopped server works too.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
	s.logf.Close()
}

// Stop freezes the server with SIGSTOP: connections stay open and the
// kernel still accepts new ones, but nothing is answered (a hung Redis).
func (s *Server) Stop() { s.signal(syscall.SIGSTOP) }

// Cont resumes a server frozen by Stop.
func (s *Server) Cont() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %s to a server that is not running", sig)
		return
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: sending %s: %v", sig, err)
	}
}

// Restart kills the server if it runs and starts a fresh one on the same port
// (its data is gone), waiting until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	// A port just freed can briefly refuse to bind; retry within the start
	// timeout rather than fail on the first attempt.
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.launch()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr(), err)
			return
		}
		time.Sleep(20 * time.Millisecond) // waiting for the kernel to release the port
	}
}

func (s *Server) cleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		// A stopped process cannot die of SIGKILL until it runs again on
		// some systems; SIGCONT first makes the kill certain.
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
	s.killLocked()
}

// Do sends one command to addr over a fresh connection and returns the reply
// as text: simple strings and bulk strings as they are, integers in decimal.
// A Redis error reply is returned as an error. It is meant for test setup and
// inspection, not for load.
func Do(addr string, args ...string) (string, error) {
	return do(addr, nil, args...)
}

// Do is the package-level Do for this server, over TLS when it speaks TLS.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr(), s.tls, args...)
}

func do(addr string, tlsCfg *tls.Config, args ...string) (string, error) {
	d := &net.Dialer{Timeout: time.Second}
	var conn net.Conn
	var err error
	if tlsCfg != nil {
		conn, err = tls.DialWithDialer(d, "tcp", addr, tlsCfg)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '*':
		if line == "*-1" {
			return "", nil // a nil array
		}
		return "", fmt.Errorf("unsupported reply %q", line)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unsupported reply %q", line)
	}
}
