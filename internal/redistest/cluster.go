package redistest

import (
	"os/exec"
	"strings"
	"time"
)

// clusterTimeout bounds cluster creation and the wait for cluster_state:ok.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of three masters without replicas.
type Cluster struct {
	// Servers are the masters, in the order their slots were assigned.
	Servers []*Server
}

// StartCluster starts three cluster-enabled servers on free loopback ports,
// joins them with `redis-cli --cluster create`, and waits until every node
// reports cluster_state:ok. Everything is cleaned up when the test ends.
func StartCluster(t TB) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found on PATH; install it with: %s", InstallHint)
	}
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		c.Servers = append(c.Servers, start(t, serverArgs([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		}), true, nil))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, s := range c.Servers {
		for {
			info, err := Do(s.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: node %s not ok within %s: %v\n%s", s.Addr(), clusterTimeout, err, info)
			}
			time.Sleep(20 * time.Millisecond) // polling external processes
		}
	}
	return c
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}
