package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the kernel's control groups are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// LimitCPU caps the running server's CPU at quota in every period, as
// though it had a core of quota/period of its own: a Redis that is slower
// than what loads it, which a small machine cannot otherwise show. It moves
// the process into a control group of its own (cgroup v1's cpu controller,
// or v2's cpu.max), removed when the test ends. A restart loses the cap.
// It needs root and a writable cpu controller; the error says which is
// missing.
func (s *Server) LimitCPU(quota, period time.Duration) error {
	s.t.Helper()
	if quota < time.Millisecond || period < quota || period > time.Second {
		return fmt.Errorf("redistest: cpu cap %v every %v: want 1ms <= quota <= period <= 1s", quota, period)
	}
	pid := s.Pid()
	if pid == 0 {
		return errors.New("redistest: cpu cap on a server that is not running")
	}
	c, err := newCPUGroup("redistest-"+strconv.Itoa(pid), quota, period)
	if err != nil {
		return err
	}
	if err := c.write("cgroup.procs", strconv.Itoa(pid)); err != nil {
		c.remove(0)
		return err
	}
	s.t.Cleanup(func() { c.remove(pid) })
	return nil
}

// PinCPU keeps the running server's main thread (the one that runs every
// command) on the given CPU. With LimitCPU it keeps the server's quota on
// one CPU's run queue: the kernel hands a group's quota out per CPU, and a
// capped server that moves between CPUs can find its share on the other.
// A restart loses the pin.
func (s *Server) PinCPU(cpu int) error {
	s.t.Helper()
	pid := s.Pid()
	if pid == 0 {
		return errors.New("redistest: pinning a server that is not running")
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		return fmt.Errorf("redistest: pinning redis-server to CPU %d: %w", cpu, err)
	}
	return nil
}

// cpuGroup is one control group with a CPU quota.
type cpuGroup struct {
	parent, dir string
}

// newCPUGroup makes a control group named name whose processes share quota
// in every period.
func newCPUGroup(name string, quota, period time.Duration) (*cpuGroup, error) {
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	v1 := filepath.Join(cgroupRoot, "cpu")
	if _, err := os.Stat(filepath.Join(v1, "cpu.cfs_quota_us")); err == nil {
		c := &cpuGroup{parent: v1, dir: filepath.Join(v1, name)}
		if err := os.Mkdir(c.dir, 0o755); err != nil {
			return nil, fmt.Errorf("redistest: cpu cap needs a writable cgroup v1 cpu controller: %w", err)
		}
		if err := c.write("cpu.cfs_period_us", us(period)); err != nil {
			c.remove(0)
			return nil, err
		}
		if err := c.write("cpu.cfs_quota_us", us(quota)); err != nil {
			c.remove(0)
			return nil, err
		}
		return c, nil
	}
	ctrl, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil || !slices.Contains(strings.Fields(string(ctrl)), "cpu") {
		return nil, errors.New("redistest: cpu cap needs cgroup v1's cpu controller or v2's cpu controller at " + cgroupRoot + ": neither is here")
	}
	c := &cpuGroup{parent: cgroupRoot, dir: filepath.Join(cgroupRoot, name)}
	// Enabling cpu for the children may already be done; the write of
	// cpu.max below says whether it took.
	_ = os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+cpu"), 0o644)
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("redistest: cpu cap needs a writable cgroup v2 hierarchy: %w", err)
	}
	if err := c.write("cpu.max", us(quota)+" "+us(period)); err != nil {
		c.remove(0)
		return nil, err
	}
	return c, nil
}

func (c *cpuGroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("redistest: cpu cap: writing %s: %w", file, err)
	}
	return nil
}

// remove moves pid (when not 0 and still alive) back to the parent group
// and removes the group; a group that still holds a process stays.
func (c *cpuGroup) remove(pid int) {
	if pid != 0 {
		_ = os.WriteFile(filepath.Join(c.parent, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
	}
	_ = os.Remove(c.dir)
}
