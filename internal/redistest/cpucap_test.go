package redistest

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuCapPossible reports whether this machine lets LimitCPU work: root, and
// a cpu controller, v1 or v2, in which a group can be made (tried with an
// empty one, removed at once).
func cpuCapPossible() bool {
	if os.Geteuid() != 0 {
		return false
	}
	dir := filepath.Join(cgroupRoot, "cpu")
	if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil {
		ctrl, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
		if err != nil || !slices.Contains(strings.Fields(string(ctrl)), "cpu") {
			return false
		}
		dir = cgroupRoot
	}
	probe := filepath.Join(dir, "redistest-probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return false
	}
	return os.Remove(probe) == nil
}

// A capped server gets its share and no more: a script spinning on it takes
// at least several times its CPU in wall time. Where no cpu controller can
// be written, LimitCPU says so instead of pretending.
func TestLimitCPU(t *testing.T) {
	var group string // the capped server's cgroup, once made
	t.Run("capped", func(t *testing.T) {
		s := Start(t)
		err := s.LimitCPU(time.Millisecond, 10*time.Millisecond)
		if !cpuCapPossible() {
			if err == nil {
				t.Fatal("LimitCPU succeeded where no cpu controller is writable")
			}
			t.Logf("not capped here, as expected: %v", err)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "redistest-" + strconv.Itoa(s.Pid())
		cg, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid()) + "/cgroup")
		if err != nil || !strings.Contains(string(cg), name) {
			t.Fatalf("server's cgroups %q (%v): want %s among them", cg, err, name)
		}
		group = name
		cpu := CPU(t, s.Addr())
		start := time.Now()
		if _, err := s.Do("EVAL", "local i = 0 while i < 5000000 do i = i + 1 end return i", "0"); err != nil {
			t.Fatal(err)
		}
		wall, used := time.Since(start), CPU(t, s.Addr())-cpu
		// At a tenth of a core the script waits out nine tenths of each
		// period; a busy machine only makes the wall time longer.
		if used <= 0 || wall < 5*used {
			t.Errorf("script used %v of CPU in %v: want at least 5 times its CPU in wall time at a 10%% cap", used, wall)
		}
		t.Logf("capped at 10%%: %v of CPU in %v", used, wall)
	})
	if group == "" {
		return
	}
	for _, dir := range []string{filepath.Join(cgroupRoot, "cpu", group), filepath.Join(cgroupRoot, group)} {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("cgroup %s left behind after the test", dir)
		}
	}
}

func TestLimitCPURefusesBadCaps(t *testing.T) {
	s := Start(t)
	for _, c := range [][2]time.Duration{{0, 10 * time.Millisecond}, {20 * time.Millisecond, 10 * time.Millisecond}, {time.Millisecond, 2 * time.Second}} {
		if err := s.LimitCPU(c[0], c[1]); err == nil || !strings.Contains(err.Error(), "want 1ms") {
			t.Errorf("LimitCPU(%v, %v) = %v, want the bounds named", c[0], c[1], err)
		}
	}
}

func TestPinCPU(t *testing.T) {
	s := Start(t)
	last := runtime.NumCPU() - 1
	if err := s.PinCPU(last); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid()) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := "Cpus_allowed_list:\t" + strconv.Itoa(last) + "\n"
	if !strings.Contains(string(status), want) {
		t.Errorf("server's status has no %q:\n%s", want, status)
	}
	if _, err := s.Do("PING"); err != nil {
		t.Errorf("pinned server: %v", err)
	}
}
