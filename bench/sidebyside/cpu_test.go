package main

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis: fields count after
	// its last ")". pgrp 4242, utime 150 and stime 25 ticks.
	line := "1234 (nginx: (worker) x) S 1 4242 4242 0 -1 4194624 900 0 0 0 150 25 0 0 20 0 1 0 100 1000 10 18446744073709551615\n"
	pgrp, cpu, err := statCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if pgrp != 4242 || cpu != 1750*time.Millisecond {
		t.Fatalf("got pgrp %d, cpu %v; want 4242, 1.75s", pgrp, cpu)
	}
	for _, bad := range []string{
		"1234 nginx S 1 4242",                                     // no command name
		"1234 (nginx) S 1 4242 4242 0 -1 4 9 0",                   // too few fields
		"1234 (nginx) S 1 x 4242 0 -1 4194624 900 0 0 0 150 25 0", // pgrp not a number
	} {
		if _, _, err := statCPU(bad); err == nil {
			t.Errorf("statCPU(%q): no error", bad)
		}
	}
}

// TestGroupsCPUCountsTheWorkers runs a server-like group: a leader that
// only waits and a worker, its child, that burns CPU. The group's time is
// the worker's, which the leader's own /proc entry does not hold while
// the worker lives.
func TestGroupsCPUCountsTheWorkers(t *testing.T) {
	const worker = `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo $$; exec sleep 60`
	cmd := exec.Command("sh", "-c", `sh -c '`+worker+`' & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	leader := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-leader, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n') // the worker is done burning
	if err != nil {
		t.Fatal(err)
	}
	workerPid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	workerCPU, err := procCPU(workerPid)
	if err != nil {
		t.Fatal(err)
	}
	leaderCPU, err := procCPU(leader)
	if err != nil {
		t.Fatal(err)
	}
	group, err := groupsCPU(leader)
	if err != nil {
		t.Fatal(err)
	}
	if workerCPU < 20*time.Millisecond {
		t.Fatalf("the worker used %v, want at least 20ms for the test to mean something", workerCPU)
	}
	if group < workerCPU+leaderCPU {
		t.Errorf("group %v, want at least the worker's %v and the leader's %v", group, workerCPU, leaderCPU)
	}
	if group > 2*(workerCPU+leaderCPU)+20*time.Millisecond {
		t.Errorf("group %v, far above the worker's %v and the leader's %v: another group counted", group, workerCPU, leaderCPU)
	}
	// One pass for a target's servers and the upstream: the leader's group
	// as both here, the test's own as neither.
	server := []*proc{{cmd: cmd}}
	both, err := serversCPU(server, server)
	if err != nil {
		t.Fatal(err)
	}
	if both.own < workerCPU || both.upstream != both.own {
		t.Errorf("serversCPU: own %v, upstream %v; want both the group's, at least the worker's %v", both.own, both.upstream, workerCPU)
	}
	if none, err := serversCPU(nil, nil); err != nil || none != (runCPU{}) {
		t.Errorf("serversCPU of no server: %+v, %v; want nothing", none, err)
	}
	own, err := groupsCPU(syscall.Getpgrp())
	if err != nil {
		t.Fatal(err)
	}
	if self, err := procCPU(os.Getpid()); err != nil || own < self {
		t.Errorf("the test's own group: %v, want at least this process's %v (%v)", own, self, err)
	}
	if none, err := groupsCPU(); err != nil || none != 0 {
		t.Errorf("no group: %v, %v; want 0", none, err)
	}
}

// TestCPUPerRequest checks the medians a request and the own-cpu ratios:
// each round's own CPU (Redis's included) in units of the upstream's in the
// same round, so that rounds on a slower machine count as much as the
// others.
func TestCPUPerRequest(t *testing.T) {
	µs := time.Microsecond
	run := func(requests int64, own, up time.Duration) sample {
		n := time.Duration(requests)
		return sample{RPS: float64(requests) / 3, Requests: requests,
			CPU: runCPU{own: n * own, upstream: n * up, generator: n * 5 * µs}}
	}
	// Three times the upstream's CPU in every round, on a machine whose
	// speed moves by half.
	local := summarize(&target{name: tGatewayLocal}, []sample{
		run(100000, 30*µs, 10*µs),
		run(50000, 45*µs, 15*µs),
		run(80000, 36*µs, 12*µs),
	})
	if local.cpu.own != 36*µs || local.cpu.upstream != 12*µs || local.cpu.generator != 5*µs || local.perUpstream != 3 {
		t.Fatalf("local: %+v, %v a request of the upstream's; want 36, 12 and 5 µs, 3", local.cpu, local.perUpstream)
	}
	none := summarize(&target{name: tGatewayNone}, []sample{run(90000, 27*µs, 10*µs), run(60000, 40500*time.Nanosecond, 15*µs)})
	redis := summarize(&target{name: tGatewayRedis}, []sample{
		{Requests: 100000, CPU: runCPU{own: 3300 * time.Millisecond, upstream: time.Second}, Delta: &counters{CPU: 0.6}},
	})
	// A round without the upstream's CPU time leaves no unit.
	noUp := summarize(&target{name: tGatewayNoHdr}, []sample{run(1000, 30*µs, 10*µs), run(1000, 30*µs, 0)})
	by := map[string]summary{tGatewayLocal: local, tGatewayNone: none, tGatewayRedis: redis, tGatewayNoHdr: noUp}
	got := map[string]ratio{}
	for _, r := range ratios(by) {
		got[r.name] = r
	}
	for name, want := range map[string]float64{
		"own-cpu gateway-local/gateway-nopolicy": 2.7 / 3.0,
		"own-cpu gateway-redis/gateway-local":    3.0 / 3.9, // 33 µs of its own and 6 of Redis's, over 10
	} {
		if r := got[name]; !r.ok || r.value < want-1e-9 || r.value > want+1e-9 {
			t.Errorf("%s: got %v (ok %v), want %v", name, r.value, r.ok, want)
		}
	}
	for _, name := range []string{"own-cpu gateway-llm/gateway-nopolicy-post", "own-cpu gateway-local-noheaders/gateway-nopolicy"} {
		if r := got[name]; r.ok {
			t.Errorf("%s: got %v, want n/a", name, r.value)
		}
	}
	var b strings.Builder
	writeCPU(&b, []summary{local, redis})
	for _, want := range []string{"gateway-local  36.0  -  12.0  5.0  0.36", "gateway-redis  33.0  6.0  10.0  0.0  0.39"} {
		if !strings.Contains(strings.Join(strings.Fields(b.String()), "  "), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}
