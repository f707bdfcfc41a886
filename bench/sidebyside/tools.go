package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// versions are the tools' own version lines, in a fixed order. wrk -v
// exits 1 and nginx -v writes to stderr, so output is taken as it comes.
func versions(ctx context.Context, goBin, root string) [][2]string {
	probes := []struct {
		name string
		argv []string
	}{
		{"go", []string{goBin, "version"}},
		{"nginx", []string{"nginx", "-v"}},
		{"haproxy", []string{"haproxy", "-v"}},
		{"caddy", []string{"caddy", "version"}},
		{"wrk", []string{"wrk", "-v"}},
		{"h2load", []string{"h2load", "--version"}},
		{"redis-server", []string{"redis-server", "-v"}},
		{"# gateway", []string{"git", "-C", root, "describe", "--always", "--dirty", "--abbrev=40"}},
	}
	out := make([][2]string, 0, len(probes))
	for _, p := range probes {
		b, _ := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if line == "" {
			line = "unknown"
		}
		out = append(out, [2]string{p.name, line})
	}
	return out
}

// machine describes where the run happened.
func machine() [][2]string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "unknown"
	if b, err := exec.Command("uname", "-sr").Output(); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return [][2]string{
		{"nproc", fmt.Sprint(runtime.NumCPU())},
		{"cpu", model},
		{"kernel", kernel},
	}
}

// loadAverage is the 1, 5 and 15 minute load averages: other work on a
// shared machine shows here.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
