package memlimit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path below root -> content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	mountV2     = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	mountV1Mem  = "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	mountHybrid = "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" + mountV1Mem +
		"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)

// The cgroup layouts a gateway meets, as fixture trees: v2 with and
// without a cgroup namespace, v1 as Docker mounts it, both side by side,
// limits set on an ancestor, and no limit at all.
func TestContainer(t *testing.T) {
	for _, c := range []struct {
		name     string
		files    map[string]string
		want     uint64
		wantFile string
		wantErr  error
	}{
		{"v2 in a cgroup namespace", map[string]string{
			"proc/self/cgroup":          "0::/\n",
			"proc/self/mountinfo":       mountV2,
			"sys/fs/cgroup/memory.max":  "157286400\n",
			"sys/fs/cgroup/memory.high": "max\n",
		}, 150 << 20, "/sys/fs/cgroup/memory.max", nil},
		{"v2 limit on the pod, none on the container", map[string]string{
			"proc/self/cgroup":                             "0::/kubepods/pod1/c1\n",
			"proc/self/mountinfo":                          mountV2,
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max":    "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":       "268435456\n",
			"sys/fs/cgroup/kubepods/memory.max":            "max\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.events": "oom_kill 0\n",
		}, 256 << 20, "/sys/fs/cgroup/kubepods/pod1/memory.max", nil},
		{"v2 the least of container and pod", map[string]string{
			"proc/self/cgroup":                          "0::/kubepods/pod1/c1\n",
			"proc/self/mountinfo":                       mountV2,
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "104857600\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":    "268435456\n",
		}, 100 << 20, "/sys/fs/cgroup/kubepods/pod1/c1/memory.max", nil},
		{"v2 without a limit", map[string]string{
			"proc/self/cgroup":                    "0::/user.slice\n",
			"proc/self/mountinfo":                 mountV2,
			"sys/fs/cgroup/user.slice/memory.max": "max\n",
		}, 0, "", ErrNoLimit},
		{"v1 as Docker mounts it", map[string]string{
			"proc/self/cgroup":                           "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
			"proc/self/mountinfo":                        "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "104857600\n",
		}, 100 << 20, "/sys/fs/cgroup/memory/memory.limit_in_bytes", nil},
		{"v1 nested, limit on the parent", map[string]string{
			"proc/self/cgroup":    "4:memory:/jobs/a\n",
			"proc/self/mountinfo": mountV1Mem,
			"sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/jobs/memory.limit_in_bytes":   "209715200\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":        "9223372036854771712\n",
		}, 200 << 20, "/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", nil},
		{"v1 unlimited", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"proc/self/mountinfo":                        mountV1Mem,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0, "", ErrNoLimit},
		{"both mounted, memory on v1", map[string]string{
			"proc/self/cgroup":                                         "4:memory:/process_api/x\n1:cpu:/\n0::/\n",
			"proc/self/mountinfo":                                      mountHybrid,
			"sys/fs/cgroup/unified/cgroup.procs":                       "1\n",
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "157286400\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":               "9223372036854771712\n",
		}, 150 << 20, "/sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes", nil},
		{"a mount point with a space", map[string]string{
			"proc/self/cgroup":            "0::/\n",
			"proc/self/mountinfo":         `29 23 0:26 / /sys/fs/my\040cgroup rw - cgroup2 cgroup2 rw` + "\n",
			"sys/fs/my cgroup/memory.max": "67108864\n",
		}, 64 << 20, "/sys/fs/my cgroup/memory.max", nil},
		{"no cgroup mounted", map[string]string{
			"proc/self/cgroup":    "0::/\n",
			"proc/self/mountinfo": "22 1 0:21 / /proc rw - proc proc rw\n",
		}, 0, "", ErrNoLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, file, err := Container(tree(t, c.files))
			if !errors.Is(err, c.wantErr) || got != c.want || file != c.wantFile {
				t.Fatalf("got %d from %q, error %v; want %d from %q, error %v", got, file, err, c.want, c.wantFile, c.wantErr)
			}
		})
	}
}

// What cannot be read is an error that names the file, never a guess.
func TestContainerErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no /proc", map[string]string{}, "reading the process's cgroups"},
		{"not a number", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      mountV2,
			"sys/fs/cgroup/memory.max": "lots\n",
		}, `memory.max: "lots" is not a number of bytes`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Container(tree(t, c.files))
			if err == nil || errors.Is(err, ErrNoLimit) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestHeadroom(t *testing.T) {
	for _, c := range []struct{ limit, want uint64 }{
		{32 << 20, 16 << 20},    // small: half
		{64 << 20, 16 << 20},    // the least headroom
		{150 << 20, 16 << 20},   // a tenth would be 15 MiB
		{1 << 30, 1 << 30 / 10}, // a tenth
		{8 << 30, 8 << 30 / 10}, //
		{20 << 20, 10 << 20},    // half
	} {
		if got := Headroom(c.limit); got != c.want {
			t.Errorf("Headroom(%d): got %d, want %d", c.limit, got, c.want)
		}
	}
}

// GOMEMLIMIT wins; then the setting; -1 is none; 0 is the container's
// limit less its headroom, or none outside a limited cgroup.
func TestChoose(t *testing.T) {
	limited := func(t *testing.T) string {
		return tree(t, map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      mountV2,
			"sys/fs/cgroup/memory.max": "157286400\n",
		})
	}
	unlimited := func(t *testing.T) string {
		return tree(t, map[string]string{"proc/self/cgroup": "0::/\n", "proc/self/mountinfo": mountV2, "sys/fs/cgroup/memory.max": "max\n"})
	}
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == "GOMEMLIMIT" && v != "" }
	}
	for _, c := range []struct {
		name       string
		configured int64
		env        string
		root       func(*testing.T) string
		want       Choice
	}{
		{"GOMEMLIMIT over the setting", 100 << 20, "130MiB", limited, Choice{Source: FromEnv}},
		{"GOMEMLIMIT over the container", 0, "130MiB", limited, Choice{Source: FromEnv}},
		{"the setting over the container", 100 << 20, "", limited, Choice{Bytes: 100 << 20, Source: FromConfig}},
		{"-1: none", -1, "", limited, Choice{Source: FromNone}},
		{"the container less headroom", 0, "", limited, Choice{Bytes: 134 << 20, Source: FromContainer, Container: 150 << 20, File: "/sys/fs/cgroup/memory.max"}},
		{"no container limit", 0, "", unlimited, Choice{Source: FromNone}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Choose(c.configured, env(c.env), c.root(t))
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	if got, err := Choose(0, env(""), t.TempDir()); err == nil || got.Source != FromNone || got.Bytes != 0 {
		t.Fatalf("an unreadable cgroup: got %+v, %v; want none and an error", got, err)
	}
}
