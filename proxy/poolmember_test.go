package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// A pool member in a process of its own, for the tests that kill one with
// SIGKILL: the test binary runs itself as a tiny HTTP server.

// memberEnv, set in the environment of the test binary, makes it serve as
// the pool member of that name instead of running the tests.
const memberEnv = "RATELIMIT_GATEWAY_TEST_POOL_MEMBER"

// init runs before testing parses its flags, so the child never runs a test.
func init() {
	if name := os.Getenv(memberEnv); name != "" {
		os.Exit(serveMember(name))
	}
}

// serveMember prints "listening ADDR", then, for each request, a line
// "got METHOD ID" (ID: its X-Request-Id) before it answers: what the parent
// reads of it survives a SIGKILL.
func serveMember(name string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("listening %s\n", ln.Addr())
	var mu sync.Mutex
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		fmt.Printf("got %s %s\n", r.Method, r.Header.Get("X-Request-Id"))
		mu.Unlock()
		io.WriteString(w, name)
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// memberProcess is a pool member in a child process, and what it received.
type memberProcess struct {
	name string
	url  string
	cmd  *exec.Cmd
	done chan struct{}

	mu  sync.Mutex
	got map[string]int // request id -> times received
	n   int
}

// startMember starts the test binary as the member name and returns once
// it listens. When the test ends it is killed and waited for.
func startMember(t *testing.T, name string) *memberProcess {
	t.Helper()
	m := &memberProcess{name: name, got: map[string]int{}, done: make(chan struct{})}
	m.cmd = exec.Command(os.Args[0], "-test.run=^$")
	m.cmd.Env = append(os.Environ(), memberEnv+"="+name)
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stderr = os.Stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting member %s: %v", name, err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "listening ") {
		m.cmd.Process.Kill()
		m.cmd.Wait()
		t.Fatalf("member %s: no address: %q", name, lines.Text())
	}
	m.url = "http://" + strings.TrimPrefix(lines.Text(), "listening ")
	go func() {
		defer close(m.done)
		for lines.Scan() {
			if id, ok := strings.CutPrefix(lines.Text(), "got "); ok {
				m.mu.Lock()
				m.got[id]++
				m.n++
				m.mu.Unlock()
			}
		}
		m.cmd.Wait()
	}()
	t.Cleanup(func() {
		m.cmd.Process.Kill()
		<-m.done
	})
	return m
}

// kill sends the member SIGKILL and waits until it is gone and its output
// read. It may be called from any goroutine: it reports a failure with
// Errorf.
func (m *memberProcess) kill(t *testing.T) {
	t.Helper()
	if err := m.cmd.Process.Kill(); err != nil {
		t.Errorf("SIGKILL %s: %v", m.name, err)
		return
	}
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Errorf("member %s still running 10s after SIGKILL", m.name)
	}
}

// received is how many requests the member received.
func (m *memberProcess) received() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// times is how many times the member received the request id ("METHOD ID").
func (m *memberProcess) times(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[id]
}
