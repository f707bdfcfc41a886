package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pinning reads -pin: "auto" pins on 4 CPUs or more, "on" on 2 or more,
// "off" never. Pinned, taskset puts the load generators on the last CPU
// and the servers on the others; gen and srv are the taskset prefixes.
func pinning(mode string, cpus int) (gen, srv []string, about string, err error) {
	on := mode == "on" || mode == "auto" && cpus >= 4
	switch {
	case mode != "auto" && mode != "on" && mode != "off":
		return nil, nil, "", fmt.Errorf("-pin %q: want auto, on or off", mode)
	case on && cpus < 2:
		return nil, nil, "", fmt.Errorf("-pin on: %d CPU, nothing to pin apart", cpus)
	case !on:
		return nil, nil, fmt.Sprintf("none (-pin %s, %d CPUs)", mode, cpus), nil
	}
	g, s := strconv.Itoa(cpus-1), "0"
	if cpus > 2 {
		s = fmt.Sprintf("0-%d", cpus-2)
	}
	return []string{"taskset", "-c", g}, []string{"taskset", "-c", s},
		fmt.Sprintf("taskset: load generators on CPU %s, servers on CPU %s", g, s), nil
}

// perfWorks reports whether perf stat can count a process here (perf
// installed, kernel.perf_event_paranoid low enough).
func perfWorks(ctx context.Context) bool {
	out, err := exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", "task-clock", "--", "true").CombinedOutput()
	return err == nil && strings.Contains(string(out), "task-clock")
}

// perfStat starts perf stat on every process of the servers' process
// groups (nginx's workers with their master) for d; done waits for it and
// returns their CPU time (task-clock) over that span.
func perfStat(ctx context.Context, own []*proc, d time.Duration) (done func() (time.Duration, error), err error) {
	var pids []string
	for _, p := range own {
		out, _ := exec.CommandContext(ctx, "pgrep", "-g", strconv.Itoa(p.cmd.Process.Pid)).Output()
		pids = append(pids, strings.Fields(string(out))...)
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("perf stat: no process in the target's groups")
	}
	cmd := exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", "task-clock", "-p", strings.Join(pids, ","),
		"--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf stat: %w", err)
	}
	return func() (time.Duration, error) {
		if err := cmd.Wait(); err != nil {
			return 0, fmt.Errorf("perf stat: %w: %s", err, out.String())
		}
		return parseTaskClock(out.String())
	}, nil
}

// parseTaskClock reads perf stat -x, output: "1234.56,msec,task-clock,...".
func parseTaskClock(out string) (time.Duration, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || f[2] != "task-clock" {
			continue
		}
		if f[0] == "<not counted>" {
			return 0, nil
		}
		ms, err := strconv.ParseFloat(f[0], 64)
		if err != nil || f[1] != "msec" {
			return 0, fmt.Errorf("perf stat: task-clock %q", line)
		}
		return time.Duration(ms * float64(time.Millisecond)), nil
	}
	return 0, fmt.Errorf("perf stat: no task-clock in %q", out)
}
