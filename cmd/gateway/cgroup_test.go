package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// memCgroup is a memory-limited cgroup the test made, v1 or v2.
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup makes a cgroup limited to limit bytes without swap, below
// this process's own (v1) or at the root (v2, where a cgroup with
// processes may not have children with controllers), and removes it when
// the test ends. It needs root: without it the test fails, saying so.
func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Geteuid() != 0 {
			msg += " (this test makes a memory-limited cgroup: run it as root)"
		}
		t.Fatal(msg)
	}
	name := fmt.Sprintf("gateway-test-%d", os.Getpid())
	var c memCgroup
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "memory") {
		c = memCgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
	} else {
		own := ""
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			fail("reading /proc/self/cgroup: %v", err)
		}
		for line := range strings.Lines(string(b)) {
			if parts := strings.SplitN(strings.TrimSpace(line), ":", 3); len(parts) == 3 && hasMemory(parts[1]) {
				own = parts[2]
			}
		}
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil || own == "" {
			fail("no cgroup v2 with the memory controller at /sys/fs/cgroup and no v1 memory hierarchy at /sys/fs/cgroup/memory")
		}
		c = memCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", own, name)}
	}
	if c.v2 {
		// The root lends its children the memory controller only once its
		// subtree_control names it.
		const ctl = "/sys/fs/cgroup/cgroup.subtree_control"
		if b, err := os.ReadFile(ctl); err != nil || !hasMemory(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", ",")) {
			if err := os.WriteFile(ctl, []byte("+memory"), 0o644); err != nil {
				fail("enabling the memory controller in %s: %v", ctl, err)
			}
		}
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		fail("making cgroup %s: %v", c.dir, err)
	}
	t.Cleanup(func() {
		// The processes are gone by now (killed and waited for); the
		// kernel may take a moment to let go of the cgroup.
		for i := 0; ; i++ {
			err := os.Remove(c.dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if i == 50 {
				t.Errorf("removing cgroup %s: %v", c.dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond) // polling the kernel, not ordering the test
		}
	})
	limitFile, swapFile := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
	if c.v2 {
		limitFile, swapFile = "memory.max", "memory.swap.max"
	}
	if err := os.WriteFile(filepath.Join(c.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		fail("limiting cgroup %s: %v", c.dir, err)
	}
	swapLimit := strconv.FormatInt(limit, 10) // v1: memory and swap together
	if c.v2 {
		swapLimit = "0"
	}
	// Without swap accounting there is no file: then swap is not limited,
	// and the OOM count below still tells a kill.
	if err := os.WriteFile(filepath.Join(c.dir, swapFile), []byte(swapLimit), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		fail("limiting swap of cgroup %s: %v", c.dir, err)
	}
	return &c
}

func hasMemory(controllers string) bool {
	for c := range strings.SplitSeq(controllers, ",") {
		if c == "memory" {
			return true
		}
	}
	return false
}

// command returns a command that joins the cgroup, then runs argv.
func (c *memCgroup) command(argv ...string) *exec.Cmd {
	script := `echo $$ > "$0/cgroup.procs" && exec "$@"`
	return exec.Command("sh", append([]string{"-c", script, c.dir}, argv...)...)
}

// oomKills is the number of processes the kernel killed in the cgroup for
// want of memory.
func (c *memCgroup) oomKills(t *testing.T) int {
	t.Helper()
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^oom_kill (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no oom_kill line:\n%s", file, b)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// peak is the most memory the cgroup was charged, in bytes.
func (c *memCgroup) peak(t *testing.T) int64 {
	t.Helper()
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return -1 // memory.peak is Linux 5.19 and later
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// The gateway at its defaults, in a container limited to 150 MiB, takes
// 300 responses of 512 KiB through its in-process idempotency store (64
// MiB) and answers every one: it reads the cgroup's limit and keeps the
// runtime under it less the headroom. Without a runtime limit the same
// load was OOM-killed after 257 responses.
func TestGatewaySurvivesAMemoryLimitedCgroup(t *testing.T) {
	const limit = 150 << 20
	cg := newMemCgroup(t, limit)
	bin := buildGateway(t)
	up := idempotentUpstream(t)
	g := startBinary(t, "gateway", cg.command(bin, "serve", "-config", idempotentConfig(t, up.URL, "")))
	g.waitLog(t, 0, regexp.MustCompile(`msg="memory limit" bytes=140509184 from=cgroup cgroup_limit=157286400 headroom=16777216`))
	ok, failure := sendReplies(t, g.base)
	kills := cg.oomKills(t)
	t.Logf("in a %d MiB cgroup (v2 %v): %d of %d answered, cgroup peak %d MiB, OOM kills %d",
		limit>>20, cg.v2, ok, replies, cg.peak(t)>>20, kills)
	if ok != replies || kills != 0 {
		t.Fatalf("answered %d of %d with their whole body, OOM kills %d; want all and none (first failure: %s)", ok, replies, kills, failure)
	}
	select {
	case <-g.done:
		t.Fatalf("the gateway exited (code %d)", g.code)
	default:
	}
}
