package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
)

// The memory tests run the gateway as it ships: a binary of its own (no
// race detector, whose shadow memory would be most of what is measured),
// its resident memory read from /proc.

// The load of docs/memory.md's figures: idempotent responses of
// replyBytes each, all kept until the store's bound drops them.
const (
	replies    = 300
	replyBytes = 512 << 10
	loadConns  = 8
)

// The gateway's binary, built once for the tests that run it, in a
// directory TestMain removes.
var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	binErr    error
)

// buildGateway builds ./cmd/gateway once and returns the binary's path.
func buildGateway(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "gateway-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "gateway")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// startBinary starts cmd (a gateway serve) with the test's environment
// less its GATEWAY_ settings and memory knobs, plus cmd.Env, and returns
// once it listens. The process is killed and waited for when the test
// ends.
func startBinary(t *testing.T, name string, cmd *exec.Cmd) *gatewayProcess {
	t.Helper()
	g := &gateway{name: name, log: newGatewayLog(t, name), done: make(chan struct{})}
	extra := cmd.Env
	cmd.Env = nil
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "GATEWAY_") && k != "GOMEMLIMIT" && k != "GOGC" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdout, cmd.Stderr = g.log, g.log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: starting: %v", name, err)
	}
	go func() {
		defer close(g.done)
		_ = cmd.Wait()
		g.code = cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.done
	})
	g.base = "http://" + g.waitLog(t, 0, listeningLine)[1]
	return &gatewayProcess{gateway: g, cmd: cmd}
}

// procStatus reads one "VmRSS"-style line of pid's /proc status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the gateway's status: %v", err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/proc/%d/status has no %s", pid, field)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// idempotentUpstream answers every POST 201 with replyBytes of body.
func idempotentUpstream(t *testing.T) *httptest.Server {
	body := bytes.Repeat([]byte("x"), replyBytes)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}))
	t.Cleanup(up.Close)
	return up
}

// idempotentConfig is a route whose POSTs need an Idempotency-Key, to up,
// with extra server settings.
func idempotentConfig(t *testing.T, up, server string) string {
	return writePressureConfig(t, fmt.Sprintf(`
server: {listen: 127.0.0.1:0%s}
admin: {listen: ""}
routes:
  - name: pay
    match: {path_prefix: /pay, methods: [POST]}
    upstream: %s
    idempotency: {required: true}
`, server, up))
}

// sendReplies sends the load: replies POSTs of distinct keys over
// loadConns connections. It returns how many were answered 201 with the
// whole body, and the first other outcome.
func sendReplies(t *testing.T, base string) (ok int, failure string) {
	t.Helper()
	c := clienttest.New(t, loadConns)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int, replies)
	for i := range replies {
		next <- i
	}
	close(next)
	for range loadConns {
		wg.Go(func() {
			for i := range next {
				req, _ := http.NewRequest(http.MethodPost, base+"/pay", strings.NewReader(`{"n":`+strconv.Itoa(i)+`}`))
				req.Header.Set("Idempotency-Key", "pay-"+strconv.Itoa(i))
				got := ""
				resp, err := c.Do(req)
				if err == nil {
					n, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated || n != replyBytes || err != nil {
						got = fmt.Sprintf("request %d: %d with %d bytes (%v)", i, resp.StatusCode, n, err)
					}
				} else {
					got = fmt.Sprintf("request %d: %v", i, err)
				}
				mu.Lock()
				if got == "" {
					ok++
				} else if failure == "" {
					failure = got
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ok, failure
}

// memoryHeadroom is what docs/memory.md states the gateway may hold in RSS
// beyond its stores' bounds under a memory limit: the runtime's own, the
// buffers of the requests in flight and the garbage between collections.
const memoryHeadroom = 48 << 20

// Under a stated memory limit, 300 responses of 512 KiB through the
// in-process idempotency store (bound 64 MiB) grow the gateway's resident
// memory by no more than the bound plus the documented headroom. Without a
// limit the same load grew it by 145 MiB.
func TestIdempotentStoreRSSUnderALimit(t *testing.T) {
	bin := buildGateway(t)
	up := idempotentUpstream(t)
	const limit = 96 << 20
	path := idempotentConfig(t, up.URL, fmt.Sprintf(", memory_limit_bytes: %d", limit))
	g := startBinary(t, "gateway", exec.Command(bin, "serve", "-config", path))
	g.waitLog(t, 0, regexp.MustCompile(`msg="memory limit" bytes=`+strconv.Itoa(limit)+` from=server.memory_limit_bytes`))
	pid := g.cmd.Process.Pid
	before := procStatus(t, pid, "VmRSS")
	ok, failure := sendReplies(t, g.base)
	if ok != replies {
		t.Fatalf("answered %d of %d with their whole body; first failure: %s", ok, replies, failure)
	}
	peak := procStatus(t, pid, "VmHWM")
	const bound = 64 << 20
	t.Logf("RSS %d MiB at start, peak %d MiB: grew %d MiB under a %d MiB limit (bound %d MiB + headroom %d MiB)",
		before>>20, peak>>20, (peak-before)>>20, limit>>20, bound>>20, memoryHeadroom>>20)
	if grew := peak - before; grew > bound+memoryHeadroom {
		t.Fatalf("RSS grew by %d MiB, want at most %d MiB (the store's bound) + %d MiB (the headroom docs/memory.md states)",
			grew>>20, bound>>20, memoryHeadroom>>20)
	}
}

// GOMEMLIMIT in the environment wins over server.memory_limit_bytes (and
// over the container's limit): the runtime applied it at start, and the
// gateway leaves it; the heap floor follows it.
func TestGOMEMLIMITWins(t *testing.T) {
	bin := buildGateway(t)
	path := idempotentConfig(t, "http://127.0.0.1:9", fmt.Sprintf(", memory_limit_bytes: %d", 64<<20))
	cmd := exec.Command(bin, "serve", "-config", path)
	cmd.Env = []string{"GOMEMLIMIT=100MiB"}
	g := startBinary(t, "gateway", cmd)
	g.waitLog(t, 0, regexp.MustCompile(`msg="memory limit" bytes=104857600 from=GOMEMLIMIT`))
	g.waitLog(t, 0, regexp.MustCompile(`msg="heap floor" bytes=52428800 setting=67108864`))
}
