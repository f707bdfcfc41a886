package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What a run costs each process in CPU time, read from /proc around it:
// the target's own servers, the upstream and the load generator. CPU time
// a request is what sizes a deployment (cores for a rate), and on a shared
// machine it is what the others running there move least: a slow stretch
// takes requests from a run, not CPU time from each request.

// runCPU is the CPU time (user and system) one run took.
type runCPU struct {
	own       time.Duration // the target's servers (every process of their groups)
	upstream  time.Duration // the nginx upstream; zero for the upstream target itself
	generator time.Duration // wrk
}

// clockTick is Linux's USER_HZ, the unit of /proc's CPU times.
const clockTick = time.Second / 100

// statCPU reads a /proc/<pid>/stat line: the process group and the CPU
// time (user and system, every thread) the process has used.
func statCPU(stat string) (pgrp int, cpu time.Duration, err error) {
	// The command name may hold spaces and parentheses: fields are
	// counted after its last ")".
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(stat[end+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	var n [3]int64 // pgrp, utime, stime
	for i, at := range [3]int{2, 11, 12} {
		if n[i], err = strconv.ParseInt(f[at], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("field %d: %w", at+3, err)
		}
	}
	return int(n[0]), time.Duration(n[1]+n[2]) * clockTick, nil
}

// procCPU is the CPU time process pid has used.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	_, cpu, err := statCPU(string(b))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return cpu, nil
}

// groupsCPU is the CPU time the live processes of the process groups
// pgids have used: a server with its workers (nginx's), each started in a
// group of its own (see procs.start). A process that exits between the
// readings takes its time with it; the servers measured here live as long
// as the benchmark.
func groupsCPU(pgids ...int) (time.Duration, error) {
	var sum time.Duration
	err := eachProcess(func(pgrp int, cpu time.Duration) {
		if slices.Contains(pgids, pgrp) {
			sum += cpu
		}
	})
	return sum, err
}

// serversCPU is the CPU time the servers own and upstream have used so
// far, read in one pass over /proc.
func serversCPU(own, upstream []*proc) (runCPU, error) {
	o, u := pgids(own), pgids(upstream)
	var cpu runCPU
	err := eachProcess(func(pgrp int, t time.Duration) {
		if slices.Contains(o, pgrp) {
			cpu.own += t
		}
		if slices.Contains(u, pgrp) {
			cpu.upstream += t
		}
	})
	return cpu, err
}

// eachProcess calls f with the process group and the CPU time of every
// live process.
func eachProcess(f func(pgrp int, cpu time.Duration)) error {
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return err
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended since the listing
		}
		pgrp, cpu, err := statCPU(string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		f(pgrp, cpu)
	}
	return nil
}

// pgids are the process groups of ps (each leader's pid names its group).
func pgids(ps []*proc) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.cmd.Process.Pid
	}
	return out
}

// perRequest is d spread over n requests (zero for none).
func perRequest(d time.Duration, n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return d / time.Duration(n)
}
