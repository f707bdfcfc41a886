package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A gateway in a process of its own, for the tests that kill one with
// SIGKILL: the test binary runs itself as "gateway serve".

// serveSubprocessEnv, set in the environment of the test binary, makes it
// run "gateway serve -config $value" instead of the tests. It does not start
// with GATEWAY_, so the gateway does not read it as a setting.
const serveSubprocessEnv = "RATELIMIT_GATEWAY_TEST_SERVE_CONFIG"

// init runs before testing parses its flags, so the child never runs a test.
func init() {
	if path := os.Getenv(serveSubprocessEnv); path != "" {
		os.Exit(run(context.Background(), []string{"serve", "-config", path}, os.Stdout, os.Stderr))
	}
}

// gatewayProcess is "gateway serve" in a child process. Its embedded
// gateway's log holds the child's output, and done is closed once the
// process has been waited for.
type gatewayProcess struct {
	*gateway
	cmd *exec.Cmd
}

// startGatewayProcess starts the test binary as "gateway serve -config
// path" and returns once it logged its address. The child reads its settings
// from path alone: no GATEWAY_ variable of the test's environment reaches
// it. When the test ends the child is killed and waited for, and the test
// fails if its race detector reported a race.
func startGatewayProcess(t *testing.T, name, path string) *gatewayProcess {
	t.Helper()
	g := &gateway{name: name, log: newGatewayLog(t, name), done: make(chan struct{})}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATEWAY_") && !strings.HasPrefix(kv, serveSubprocessEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, serveSubprocessEnv+"="+path, adminListenEnv)
	// One writer for both: os/exec then copies one pipe, in one goroutine
	// that ends with Wait.
	cmd.Stdout, cmd.Stderr = g.log, g.log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: starting %s: %v", name, os.Args[0], err)
	}
	go func() {
		defer close(g.done)
		_ = cmd.Wait() // a killed child is an error; its state says how it ended
		g.code = cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // os.ErrProcessDone when the test killed it already
		select {
		case <-g.done:
		case <-time.After(20 * time.Second):
			t.Errorf("%s: not reaped within 20s of SIGKILL", name)
			return
		}
		if n := g.countLog(0, "WARNING: DATA RACE"); n > 0 {
			t.Errorf("%s: the race detector reported %d races in the child", name, n)
		}
	})
	m := g.waitLog(t, 0, listeningLine)
	g.base = "http://" + m[1]
	return &gatewayProcess{gateway: g, cmd: cmd}
}

// kill sends the child SIGKILL, waits until it is gone and returns the
// instant the signal was sent.
func (p *gatewayProcess) kill(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("%s: SIGKILL: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still running 10s after SIGKILL", p.name)
	}
	if p.code != -1 {
		t.Fatalf("%s: exit code %d after SIGKILL, want -1 (killed by a signal)", p.name, p.code)
	}
	return at
}
