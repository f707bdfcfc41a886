package redislimit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// BenchmarkNodeScriptInstructions counts the instructions Redis executes
// per GCRA decision (redis-server under valgrind --tool=callgrind: the
// whole process, from reading the call to answering it) for the calls the
// gateway sends at wrk -c64: 14 decisions merged into one call on a
// standalone server (decideManyScript), 5 on a Cluster-mode server holding
// every slot (decideManyNodeScript, what each of 3 masters gets). Unlike
// INFO's µs, instruction counts do not move with the machine's load, so
// cluster/standalone is the ratio to hold within 1.2. The same ratio at the
// batches of saturated servers (80 a call on one server, 48 on each of 3
// masters, as BenchmarkRedisCapacity finds them) says what a decision
// costs a master that is full. ns/op is the valgrind run, not a figure to
// read.
//
//	go test -run '^$' -bench BenchmarkNodeScriptInstructions -benchtime 1x ./limiter/redislimit/
func BenchmarkNodeScriptInstructions(b *testing.B) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not on PATH (apt-get install -y valgrind): it counts redis-server's instructions", tool)
		}
	}
	var standalone, cluster, standaloneSat, clusterSat, hot float64
	for b.Loop() {
		standalone = decisionInstructions(b, false, 14, false)
		cluster = decisionInstructions(b, true, 5, false)
		standaloneSat = decisionInstructions(b, false, 80, false)
		clusterSat = decisionInstructions(b, true, 48, false)
		hot = decisionInstructions(b, false, 14, true)
	}
	b.ReportMetric(standalone, "standalone@14-instr/decision")
	// One hot key (what gateway-redis sends: every request from one
	// client): the call folds its repeats (see mergeCalls).
	b.ReportMetric(hot, "standalone-hot@14-instr/decision")
	b.ReportMetric(cluster, "cluster@5-instr/decision")
	b.ReportMetric(cluster/standalone, "cluster/standalone")
	// The batches saturation makes (BenchmarkRedisCapacity's
	// decisions/pipeline): what a decision costs a master that is full.
	b.ReportMetric(clusterSat/standaloneSat, "saturated-cluster@48/standalone@80")
}

// callgrindCalls is how many calls are counted: enough that the server's
// own timer work (serverCron, 10 a second) stays under a fraction of a
// percent of the count.
const callgrindCalls = 200

// decisionInstructions starts redis-server under callgrind (in Cluster mode
// holding every slot when cluster) and returns the instructions it spends
// per decision on the merged call of batch GCRA decisions the gateway would
// send it (see callInstructions): on as many keys, or all on one when hot.
func decisionInstructions(b *testing.B, cluster bool, batch int, hot bool) float64 {
	b.Helper()
	s := startCallgrind(b, cluster)
	check := limiter.Check{Rule: policy("ni-gcra", limiter.GCRA), Limit: limiter.Limit{Rate: 1_000_000, Period: time.Hour}}
	cmds := make([]redis.Cmder, batch)
	for i := range cmds {
		key := strconv.Itoa(i * 7919 % 1000)
		if hot {
			key = "hot"
		}
		cmds[i] = decideCall(b, key, check)
	}
	var merged []redis.Cmder
	if cluster {
		merged, _, _ = mergeNodeDecides(cmds)
	} else {
		merged, _ = mergeDecides(cmds)
	}
	if len(merged) != 1 {
		b.Fatalf("merged into %d calls, want 1", len(merged))
	}
	return float64(s.callInstructions(b, merged[0].Args(), batch)) / float64(batch)
}

// callInstructions loads the decision scripts, warms s up with the call
// args, then counts the instructions of callgrindCalls such calls, sent one
// round trip at a time as pipelines are, and returns them per call. Each
// reply must admit and record every request the call carries (one check
// each).
func (s *callgrindServer) callInstructions(b *testing.B, args []any, requests int) int64 {
	b.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: time.Minute})
	defer c.Close()
	for _, src := range []string{decideSrc, decideManySrc, decideManyNodeSrc} {
		if err := c.ScriptLoad(ctx, src).Err(); err != nil {
			b.Fatal(err)
		}
	}
	call := func(n int) {
		for range n {
			v, err := c.Do(ctx, args...).Int64Slice()
			if err != nil {
				b.Fatal(err)
			}
			if err := admittedAll(v, requests); err != nil {
				b.Fatalf("got reply %v: %v", v, err)
			}
		}
	}
	call(20) // keys made, allocator and Lua warm
	s.control(b, "-z")
	call(callgrindCalls)
	return s.dump(b) / callgrindCalls
}

// admittedAll checks that v is the reply to a merged call of n requests
// of one check each, all admitted and recorded.
func admittedAll(v []int64, n int) error {
	for i := range n {
		size, err := decideReplyLen(v, 1)
		if err != nil {
			return fmt.Errorf("request %d: %w", i+1, err)
		}
		replies, recorded, err := parseDecideReply(v[:size], 1)
		if err != nil || !replies[0].allowed || !recorded {
			return fmt.Errorf("request %d: %+v recorded %v, %v; want admitted and recorded", i+1, replies, recorded, err)
		}
		v = v[size:]
	}
	if len(v) > 0 {
		return fmt.Errorf("%d integers more than %d requests' replies", len(v), n)
	}
	return nil
}

// callgrindServer is a redis-server running under callgrind.
type callgrindServer struct {
	addr, dir string
	pid       int
}

func startCallgrind(b *testing.B, cluster bool) *callgrindServer {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := b.TempDir()
	// Only what the server does for a call counts: reading and running it,
	// writing its reply. Its timer (serverCron) runs as often as the wall
	// clock says, and valgrind's pace moves with the machine's load.
	args := []string{"--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "callgrind.out"),
		"--collect-atstart=no", "--toggle-collect=readQueryFromClient", "--toggle-collect=handleClientsWithPendingWritesUsingThreads",
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no"}
	if cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	}
	logf, err := os.Create(filepath.Join(dir, "valgrind.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("valgrind", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting valgrind: %v", err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	s := &callgrindServer{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, pid: cmd.Process.Pid}
	s.wait(b, func() bool { reply, err := redistest.Do(s.addr, "PING"); return err == nil && reply == "PONG" })
	if cluster {
		if _, err := redistest.Do(s.addr, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
			b.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
		s.wait(b, func() bool {
			info, err := redistest.Do(s.addr, "CLUSTER", "INFO")
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	return s
}

// wait polls ready, for a minute: a server under valgrind starts slowly,
// and an external process sends no event to wait on.
func (s *callgrindServer) wait(b *testing.B, ready func() bool) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); !ready(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "valgrind.log"))
			b.Fatalf("redis-server under valgrind on %s not ready within a minute; log:\n%s", s.addr, log)
		}
	}
}

func (s *callgrindServer) control(b *testing.B, flag string) {
	b.Helper()
	if out, err := exec.Command("callgrind_control", flag, strconv.Itoa(s.pid)).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %s: %v\n%s", flag, err, out)
	}
}

// dump has callgrind write its counts since the last zeroing and returns
// the instructions executed (the dump's summary line).
func (s *callgrindServer) dump(b *testing.B) int64 {
	b.Helper()
	s.control(b, "-d")
	files, _ := filepath.Glob(filepath.Join(s.dir, "callgrind.out.*"))
	if len(files) != 1 {
		b.Fatalf("got callgrind dumps %v, want one", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatalf("callgrind summary %q: %v", v, err)
			}
			return n
		}
	}
	b.Fatalf("no summary line in %s", files[0])
	return 0
}
