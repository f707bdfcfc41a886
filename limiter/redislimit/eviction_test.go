package redislimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
)

// A Redis that may evict keys when full is told apart from one that may
// not, on a real redis-server started with each setting.
func TestEvictionPolicies(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		evicts bool
	}{
		{"default", nil, false},
		{"noeviction with a limit", []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, false},
		{"allkeys-lru with a limit", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, true},
		{"allkeys-random with a limit", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-random"}, true},
		{"volatile-ttl with a limit", []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"}, true},
		{"allkeys-lru without a limit", []string{"--maxmemory-policy", "allkeys-lru"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.StartWithArgs(t, tc.args...)
			client := redis.NewClient(&redis.Options{Addr: s.Addr()})
			defer client.Close()
			nodes, err := redislimit.EvictionPolicies(context.Background(), client)
			if err != nil || len(nodes) != 1 {
				t.Fatalf("EvictionPolicies: got %+v, %v; want one node", nodes, err)
			}
			if got := nodes[0].Evicts(); got != tc.evicts {
				t.Fatalf("%+v: Evicts got %v, want %v", nodes[0], got, tc.evicts)
			}
			if nodes[0].Addr != s.Addr() {
				t.Fatalf("addr: got %q, want %q", nodes[0].Addr, s.Addr())
			}
		})
	}
}

// On a Cluster every master is read: one set to evict is found among three.
func TestEvictionPoliciesCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	if _, err := c.Servers[1].Do("CONFIG", "SET", "maxmemory", "64mb"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Servers[1].Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer client.Close()
	nodes, err := redislimit.EvictionPolicies(context.Background(), client)
	if err != nil || len(nodes) != 3 {
		t.Fatalf("EvictionPolicies: got %+v, %v; want three masters", nodes, err)
	}
	var evicting []string
	for _, n := range nodes {
		if n.Evicts() {
			evicting = append(evicting, n.Addr)
		}
	}
	if len(evicting) != 1 || evicting[0] != c.Servers[1].Addr() {
		t.Fatalf("evicting nodes: got %v, want [%s]", evicting, c.Servers[1].Addr())
	}
}

// A Redis that refuses CONFIG (an ACL without it) is an error naming the
// node, not a guess.
func TestEvictionPoliciesRefused(t *testing.T) {
	s := redistest.StartWithArgs(t, "--user", "gw", "on", ">pw", "~*", "+@all", "-config")
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "gw", Password: "pw"})
	defer client.Close()
	_, err := redislimit.EvictionPolicies(context.Background(), client)
	if err == nil || !strings.Contains(err.Error(), s.Addr()) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("got %v, want a NOPERM error naming %s", err, s.Addr())
	}
}
