// Package memlimit finds the memory limit of the cgroup a process runs in
// (v2, v1, or both mounted side by side) and the Go runtime soft limit the
// gateway derives from it.
//
// It reads the cgroup files itself, below a root directory that tests
// point at fixture trees: automemlimit reads the same files but only at
// their fixed paths under /proc and /sys, which no test can lay out.
package memlimit

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Headroom is what the runtime's limit leaves of a container's limit for
// what the runtime does not count or cannot give back at once: the
// binary's mapped text, C and kernel allocations, and the heap growth
// between two collections. It is a tenth of the limit, at least
// MinHeadroom; a limit of 2 × MinHeadroom or less keeps half.
func Headroom(limit uint64) uint64 {
	if limit <= 2*MinHeadroom {
		return limit / 2
	}
	return max(limit/10, MinHeadroom)
}

// MinHeadroom is the least Headroom.
const MinHeadroom = 16 << 20

// v1Unlimited is the least memory.limit_in_bytes that means "no limit":
// cgroup v1 writes the largest page multiple of an int64 (2^63 - 4096 on
// 4 KiB pages); anything above 2^62 is beyond any machine.
const v1Unlimited = 1 << 62

// ErrNoLimit is returned by Container when no cgroup limits the memory.
var ErrNoLimit = errors.New("no cgroup memory limit")

// Container returns the memory limit of the cgroup this process is in,
// the least of its own and its ancestors', and the file it was read from.
// root is "/" but in tests. Under cgroup v2 it reads memory.max; under v1
// memory.limit_in_bytes; where both are mounted, v2's when its memory
// controller is on. It returns ErrNoLimit when nothing limits the memory.
func Container(root string) (uint64, string, error) {
	groups, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, "", fmt.Errorf("reading the process's cgroups: %w", err)
	}
	mounts, err := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return 0, "", fmt.Errorf("reading the mounts: %w", err)
	}
	var v1, v2 string
	hasV1, hasV2 := false, false
	for line := range strings.Lines(string(groups)) {
		parts := strings.SplitN(strings.TrimRight(line, "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2, hasV2 = parts[2], true
		case hasController(parts[1], "memory"):
			v1, hasV1 = parts[2], true
		}
	}
	if hasV2 {
		if dir, ok := cgroupDir(root, mounts, "cgroup2", "", v2); ok {
			limit, file, err := walk(root, dir, "memory.max")
			if !errors.Is(err, os.ErrNotExist) { // absent: no memory controller here
				return limit, file, err
			}
		}
	}
	if hasV1 {
		if dir, ok := cgroupDir(root, mounts, "cgroup", "memory", v1); ok {
			return walk(root, dir, "memory.limit_in_bytes")
		}
	}
	return 0, "", ErrNoLimit
}

// hasController reports whether the comma-separated list names c.
func hasController(list, c string) bool {
	for name := range strings.SplitSeq(list, ",") {
		if name == c {
			return true
		}
	}
	return false
}

// cgroupDir is the directory, below root, of the cgroup at cgroupPath in
// the hierarchy mounted with fstype (and, for v1, the controller among its
// super options). A container sees its own cgroup as the mount's root, and
// its path as either "/" (a cgroup namespace) or the mount's root itself.
func cgroupDir(root string, mountinfo []byte, fstype, controller, cgroupPath string) (string, bool) {
	for line := range bytes.Lines(mountinfo) {
		pre, post, ok := strings.Cut(strings.TrimSpace(string(line)), " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 3 || p[0] != fstype || (controller != "" && !hasController(p[2], controller)) {
			continue
		}
		mountRoot, mountPoint := unescape(f[3]), unescape(f[4])
		rel := cgroupPath
		if mountRoot != "/" {
			r, found := strings.CutPrefix(cgroupPath, mountRoot)
			if !found || (r != "" && !strings.HasPrefix(r, "/")) {
				continue
			}
			rel = r
		}
		return filepath.Join(root, mountPoint, path.Clean("/"+rel)), true
	}
	return "", false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// walk reads name in dir and each ancestor up to the mount (a parent's
// limit binds its children) and returns the least limit and its file.
// The first file must exist.
func walk(root, dir, name string) (uint64, string, error) {
	least, from := uint64(math.MaxUint64), ""
	for first := true; ; first = false {
		file := filepath.Join(dir, name)
		b, err := os.ReadFile(file)
		if err != nil {
			if first {
				return 0, "", err
			}
			break // above the mount
		}
		v := strings.TrimSpace(string(b))
		if v != "max" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, "", fmt.Errorf("reading %s: %q is not a number of bytes", file, v)
			}
			if n < v1Unlimited && n < least {
				least, from = n, file
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir || len(parent) < len(root) {
			break
		}
		dir = parent
	}
	if from == "" {
		return 0, "", ErrNoLimit
	}
	return least, strings.TrimPrefix(from, strings.TrimSuffix(root, "/")), nil
}
