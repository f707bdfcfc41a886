package main

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// A Redis whose maxmemory-policy may evict the gateway's keys (allkeys-lru
// with a maxmemory) is warned about at start, in the log and in
// gateway_redis_evicting; a noeviction one is not.
func TestServeWarnsWhenRedisMayEvict(t *testing.T) {
	tests := []struct {
		name, policy string
		evicts       bool
	}{
		{"allkeys-lru", "allkeys-lru", true},
		{"noeviction", "noeviction", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.StartWithArgs(t, "--maxmemory", "64mb", "--maxmemory-policy", tc.policy)
			t.Setenv("GATEWAY_SERVER_LISTEN", "127.0.0.1:0")
			t.Setenv("GATEWAY_REDIS_ADDRS", s.Addr())
			g := startGateway(t, "gw", writeRedisConfig(t))
			code, text := adminDo(t, http.MethodGet, g.adminBase(t)+"/metrics", "")
			if code != http.StatusOK {
				t.Fatalf("/metrics: %d", code)
			}
			want := 0.0
			if tc.evicts {
				want = 1
			}
			if got := scrapeValue(t, text, "gateway_redis_evicting", "node="+s.Addr()+",policy="+tc.policy); got != want {
				t.Fatalf("gateway_redis_evicting: got %v, want %v", got, want)
			}
			warn := regexp.MustCompile(`level=WARN msg="redis at ` + regexp.QuoteMeta(s.Addr()) + ` has maxmemory-policy allkeys-lru with maxmemory 67108864: when it fills, it evicts keys`)
			if tc.evicts {
				g.waitLog(t, 0, warn)
				return
			}
			g.log.mu.Lock()
			defer g.log.mu.Unlock()
			for _, line := range g.log.lines {
				if regexp.MustCompile(`maxmemory-policy`).MatchString(line) {
					t.Fatalf("a noeviction redis was warned about: %s", line)
				}
			}
		})
	}
}
