package main

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestServeChecksRedisCredentialsAtStart: credentials Redis refuses would
// make every shared decision fail, and with on_redis_error: allow the
// gateway would run without its shared limits, saying so once. So a start
// with credentials Redis refuses fails, naming the setting; a Redis that
// does not answer is an outage the failure modes are for, so the gateway
// starts and warns.
func TestServeChecksRedisCredentialsAtStart(t *testing.T) {
	secured := redistest.StartWithArgs(t, "--requirepass", "right-password")
	acl := redistest.StartWithArgs(t, "--user", "limited", "on", ">pw", "~*", "-@all")
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	// A Redis that accepts connections (the kernel does) and never answers.
	hung := redistest.Start(t)
	hung.Stop()
	t.Cleanup(hung.Cont)

	tests := []struct {
		name string
		env  map[string]string
		// want is a pattern of the exit message; "" means the gateway starts.
		want string
		// warn is a pattern of a WARN line logged by a gateway that starts.
		warn string
	}{
		{"wrong password", map[string]string{"GATEWAY_REDIS_ADDRS": secured.Addr(), "GATEWAY_REDIS_PASSWORD": "wrong"},
			`^gateway: \S+/gateway\.redis\.yaml: redis\.password: redis at 127\.0\.0\.1:\d+ refused the credentials: WRONGPASS invalid username-password pair or user is disabled\. \(check redis\.username and redis\.password, or GATEWAY_REDIS_USERNAME and GATEWAY_REDIS_PASSWORD\)$`, ""},
		{"no password", map[string]string{"GATEWAY_REDIS_ADDRS": secured.Addr()},
			`^gateway: \S+/gateway\.redis\.yaml: redis\.password: redis at 127\.0\.0\.1:\d+ refused the credentials: NOAUTH `, ""},
		{"user without permissions", map[string]string{"GATEWAY_REDIS_ADDRS": acl.Addr(), "GATEWAY_REDIS_USERNAME": "limited", "GATEWAY_REDIS_PASSWORD": "pw"},
			`^gateway: \S+/gateway\.redis\.yaml: redis\.username: redis at 127\.0\.0\.1:\d+ refused user "limited" a command: NOPERM `, ""},
		{"right password", map[string]string{"GATEWAY_REDIS_ADDRS": secured.Addr(), "GATEWAY_REDIS_PASSWORD": "right-password"},
			"", ""},
		{"redis down", map[string]string{"GATEWAY_REDIS_ADDRS": closed},
			"", `level=WARN msg="redis did not answer at start; shared policies apply their on_redis_error mode until it does" addrs=127\.0\.0\.1:\d+ error=`},
		{"redis hung", map[string]string{"GATEWAY_REDIS_ADDRS": hung.Addr()},
			"", `level=WARN msg="redis did not answer at start; shared policies apply their on_redis_error mode until it does" addrs=127\.0\.0\.1:\d+ error=".*timeout`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			start := time.Now()
			g, exited := serveOutcome(t, "gateway", writeRedisConfig(t))
			// The PING at start is bounded by startupPingTimeout.
			if took := time.Since(start); took > startupPingTimeout+2*time.Second {
				t.Errorf("the start took %v, want at most %v", took, startupPingTimeout+2*time.Second)
			}
			if tt.want == "" {
				if exited {
					t.Fatalf("serve exited %d, want it to start; output:\n%s", g.code, g.output())
				}
				if tt.warn != "" {
					g.waitLog(t, 0, regexp.MustCompile(tt.warn))
				}
				return
			}
			if !exited {
				t.Fatalf("serve started (%s), want it to refuse to; output:\n%s", g.base, g.output())
			}
			last := g.output()[strings.LastIndexByte(g.output(), '\n')+1:]
			if g.code != 1 || !regexp.MustCompile(tt.want).MatchString(last) {
				t.Errorf("got exit %d, last line %q; want exit 1 and a line matching %q", g.code, last, tt.want)
			}
		})
	}
}

// On a Cluster the start runs the gateway's script on every master, on a
// key of its slots: a user whom one master refuses EVALSHA stops the start
// with an error naming that master, though the others and PING accept it.
func TestServeChecksRedisRightsOnEveryClusterNode(t *testing.T) {
	c := redistest.StartCluster(t)
	refusing := c.Servers[1]
	for _, s := range c.Servers {
		rights := "+@all"
		if s == refusing {
			rights = "-evalsha"
		}
		if _, err := redistest.Do(s.Addr(), "ACL", "SETUSER", "gw", "on", ">pw", "~*", "+@all", rights); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
	t.Setenv("GATEWAY_REDIS_ADDRS", strings.Join(c.Addrs(), ","))
	t.Setenv("GATEWAY_REDIS_USERNAME", "gw")
	t.Setenv("GATEWAY_REDIS_PASSWORD", "pw")
	g, exited := serveOutcome(t, "gateway", writeRedisConfig(t))
	if !exited {
		t.Fatalf("serve started (%s), want it to refuse to; output:\n%s", g.base, g.output())
	}
	last := g.output()[strings.LastIndexByte(g.output(), '\n')+1:]
	want := regexp.MustCompile(`^gateway: \S+/gateway\.redis\.yaml: redis\.username: redis at node ` + regexp.QuoteMeta(refusing.Addr()) +
		` of the cluster \S+ refused user "gw" a command: NOPERM .*evalsha`)
	if g.code != 1 || !want.MatchString(last) {
		t.Errorf("got exit %d, last line %q; want exit 1 and a line matching %q", g.code, last, want)
	}
}
