package redistest

import (
	"maps"
	"net"
	"strings"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("got addr %q, want a loopback address", s.Addr())
	}
	if _, err := Do(s.Addr(), "SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := Do(s.Addr(), "GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET: got %q, %v, want \"v\"", got, err)
	}

	t.Run("stop hangs, cont resumes", func(t *testing.T) {
		s.Stop()
		conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			t.Fatalf("dial while stopped: %v (the kernel should still accept)", err)
		}
		_ = conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = conn.Write([]byte("PING\r\n"))
		buf := make([]byte, 16)
		if n, err := conn.Read(buf); err == nil {
			t.Fatalf("read while stopped: got %q, want a timeout", buf[:n])
		}
		conn.Close()
		s.Cont()
		if got, err := Do(s.Addr(), "PING"); err != nil || got != "PONG" {
			t.Fatalf("PING after Cont: got %q, %v, want PONG", got, err)
		}
	})

	t.Run("kill refuses connections", func(t *testing.T) {
		s.Kill()
		if _, err := Do(s.Addr(), "PING"); err == nil {
			t.Fatal("PING after Kill: got an answer, want an error")
		}
	})

	t.Run("restart on the same port forgets data", func(t *testing.T) {
		addr := s.Addr()
		s.Restart()
		if s.Addr() != addr {
			t.Fatalf("got addr %q after restart, want %q", s.Addr(), addr)
		}
		got, err := Do(s.Addr(), "GET", "k")
		if err != nil || got != "" {
			t.Fatalf("GET after restart: got %q, %v, want nil (no persistence)", got, err)
		}
	})
}

func TestStartWithArgs(t *testing.T) {
	s := StartWithArgs(t, "--requirepass", "s3cret")
	if _, err := Do(s.Addr(), "GET", "k"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("GET without AUTH: got %v, want NOAUTH", err)
	}
}

func TestCommandCount(t *testing.T) {
	s := Start(t)
	ResetStats(t, s.Addr())
	for i := 0; i < 3; i++ {
		if _, err := Do(s.Addr(), "PING"); err != nil {
			t.Fatal(err)
		}
	}
	if got := CommandCount(t, s.Addr(), "ping"); got != 3 {
		t.Fatalf("ping calls: got %d, want 3", got)
	}
	// All commands: CONFIG RESETSTAT (counted after its own reset), 3 PING
	// and the INFO of the call above; an INFO is not in its own reply.
	if got := CommandCount(t, s.Addr()); got != 5 {
		t.Fatalf("all calls: got %d, want 5 (RESETSTAT, 3 PING, 1 INFO)", got)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=50,usec_per_call=4.17,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_eval:calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]CommandStat{"evalsha": {Calls: 12, Usec: 50}, "eval": {Calls: 3, Usec: 9}}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Addrs()) != 3 {
		t.Fatalf("got %d nodes, want 3", len(c.Addrs()))
	}
	for _, s := range c.Servers {
		info, err := Do(s.Addr(), "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"cluster_state:ok", "cluster_known_nodes:3", "cluster_slots_assigned:16384"} {
			if !strings.Contains(info, want) {
				t.Fatalf("node %s: CLUSTER INFO lacks %q:\n%s", s.Addr(), want, info)
			}
		}
	}
}

func TestSentinel(t *testing.T) {
	master := Start(t)
	s := StartSentinel(t, master, "mymaster")
	// SENTINEL GET-MASTER-ADDR-BY-NAME replies with an array; asking for a
	// name it does not know gives a nil reply, which Do reads.
	if got, err := Do(s.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "nobody"); err != nil || got != "" {
		t.Fatalf("unknown master: got %q, %v, want nil", got, err)
	}
	if got, err := Do(s.Addr(), "PING"); err != nil || got != "PONG" {
		t.Fatalf("sentinel PING: got %q, %v, want PONG", got, err)
	}
}

func TestStartTLS(t *testing.T) {
	s, pool := StartTLS(t)
	if pool == nil {
		t.Fatal("got no CA pool")
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING over TLS: got %q, %v, want PONG", got, err)
	}
	if _, err := Do(s.Addr(), "PING"); err == nil {
		t.Fatal("plain PING to a TLS-only server: got an answer, want an error")
	}
}

// ParseCPU adds the server's user and system time, not its children's, and
// names what is missing or malformed.
func TestParseCPU(t *testing.T) {
	got, err := ParseCPU("# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n")
	if err != nil || got != 3750*time.Millisecond {
		t.Errorf("got %v, %v; want 3.75s", got, err)
	}
	for _, bad := range []string{"# CPU\r\nused_cpu_sys:1.5\r\n", "used_cpu_sys:x\r\nused_cpu_user:1\r\n", ""} {
		if _, err := ParseCPU(bad); err == nil {
			t.Errorf("ParseCPU(%q): no error", bad)
		}
	}
}

// CPU reads a live server's clock, which only goes forward.
func TestCPU(t *testing.T) {
	s := Start(t)
	a := CPU(t, s.Addr())
	for range 200 {
		if _, err := Do(s.Addr(), "PING"); err != nil {
			t.Fatal(err)
		}
	}
	if b := CPU(t, s.Addr()); b < a || b == 0 {
		t.Errorf("CPU %v then %v: want a clock that has run and goes forward", a, b)
	}
}
