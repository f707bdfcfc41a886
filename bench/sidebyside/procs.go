package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// readyTimeout bounds how long a server may take to accept connections.
const readyTimeout = 15 * time.Second

// stopGrace is how long a server has to exit after SIGTERM before SIGKILL.
const stopGrace = 3 * time.Second

// procs owns every server the benchmark starts: each runs in its own
// process group (nginx's workers with their master), logs to its own file
// under logDir, and is stopped by stopAll. It is safe for concurrent use.
type procs struct {
	logDir string
	pin    []string // a taskset prefix for every server, nil for none

	mu   sync.Mutex // guards list
	list []*proc
}

// proc is one started server.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
}

func newProcs(logDir string, pin []string) (*procs, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating log dir: %w", err)
	}
	return &procs{logDir: logDir, pin: pin}, nil
}

// start runs argv in dir with env added to the benchmark's environment.
func (ps *procs) start(name, dir string, env []string, argv ...string) (*proc, error) {
	logPath := filepath.Join(ps.logDir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	argv = append(slices.Clone(ps.pin), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group, so that stopping it reaches nginx's workers too;
	// killed with us if the benchmark dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// stopAll stops every server, last started first: SIGTERM to its process
// group, then SIGKILL after stopGrace.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for _, p := range list {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.After(stopGrace)
	for i := len(list) - 1; i >= 0; i-- {
		p := list[i]
		select {
		case <-p.done:
		case <-deadline:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitTCP waits until addr accepts a connection, and waitHTTP until a GET
// of url answers with any status, failing early (with the end of its log)
// if the process exits.
func (p *proc) waitTCP(ctx context.Context, addr string) error {
	return p.wait(ctx, addr, func() error {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err
	})
}

func (p *proc) waitHTTP(ctx context.Context, url string) error {
	// The TLS targets serve the run's own self-signed certificate.
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return p.wait(ctx, url, func() error {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

func (p *proc) wait(ctx context.Context, what string, ready func() error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		if p.exited() {
			return fmt.Errorf("%s exited before answering on %s: %s", p.name, what, p.logTail())
		}
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not answering on %s after %v (%v): %s", p.name, what, readyTimeout, err, p.logTail())
		case <-time.After(20 * time.Millisecond): // polling an external process
		}
	}
}

// logTail is the end of the process's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 800 {
		s = "…" + s[len(s)-800:]
	}
	if s == "" {
		return "(log " + p.logPath + " is empty)"
	}
	return s
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, taken below
// Linux's default ephemeral range (32768–60999): a port the kernel handed
// out with ":0" and that was then closed can be handed out again as the
// local port of an outgoing connection (a proxy's keep-alive to the upstream)
// before the server that was meant to bind it starts. The listeners are
// closed before the servers bind them; a server that cannot bind fails its
// start.
func freePorts(n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for try := 0; len(ports) < n; try++ {
		if try == 1000 {
			return nil, fmt.Errorf("finding %d free ports in %d–%d: only %d", n, lowPort, highPort, len(ports))
		}
		port := lowPort + rand.IntN(highPort-lowPort)
		ln, err := net.Listen("tcp", addr(port))
		if err != nil {
			continue // taken
		}
		lns = append(lns, ln)
		ports = append(ports, port)
	}
	return ports, nil
}

// The range freePorts draws from: below the ephemeral ports, above the
// well-known and most registered services.
const lowPort, highPort = 20000, 32000

// addr is 127.0.0.1:port.
func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// errorMarks are how the servers' logs mark an error: nginx, HAProxy,
// the gateway (slog text), Caddy (JSON), a Go panic.
var errorMarks = []string{"[error]", "[crit]", "[alert]", "[emerg]", "[ALERT]", "level=ERROR", `"level":"error"`, "panic:"}

// logWarnings names the servers whose logs hold error lines, with the
// count and the first one.
func (ps *procs) logWarnings() []string {
	ps.mu.Lock()
	list := slices.Clone(ps.list)
	ps.mu.Unlock()
	var out []string
	for _, p := range list {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			out = append(out, fmt.Sprintf("log %s: %v", p.name, err))
			continue
		}
		var n int
		var first string
		for _, line := range strings.Split(string(b), "\n") {
			if slices.ContainsFunc(errorMarks, func(m string) bool { return strings.Contains(line, m) }) {
				if n == 0 {
					first = line
				}
				n++
			}
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("log %s: %d error lines, the first: %s", p.name, n, first))
		}
		if p.exited() {
			out = append(out, fmt.Sprintf("%s exited during the run: %s", p.name, p.logTail()))
		}
	}
	return out
}
