package redistest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clusterTimeout bounds cluster creation and the wait for cluster_state:ok.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster on loopback.
type Cluster struct {
	// Servers are the masters, in the order their slots were assigned.
	Servers []*Server
	// Replicas are the replicas, Replicas[i] replicating Servers[i] (none
	// unless ClusterOptions.Replicas).
	Replicas []*Server

	args []string // each node's cluster arguments
}

// ClusterOptions shapes StartClusterWith's Cluster. The zero value is
// StartCluster's: three masters, no replicas, cluster-node-timeout 2000.
type ClusterOptions struct {
	// Masters is how many masters hold the slots; zero means 3. One, without
	// replicas, is a Cluster-mode server holding every slot.
	Masters int
	// Replicas gives each master one replica.
	Replicas bool
	// NodeTimeout is cluster-node-timeout; zero means 2s.
	NodeTimeout time.Duration
	// PartialCoverage sets cluster-require-full-coverage no: the other
	// masters keep serving while one is down.
	PartialCoverage bool
	// NoFailover sets cluster-replica-no-failover yes.
	NoFailover bool
}

// StartCluster starts three cluster-enabled servers on free loopback ports,
// joins them with `redis-cli --cluster create`, and waits until every node
// reports cluster_state:ok. Everything is cleaned up when the test ends.
func StartCluster(t TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{})
}

// StartClusterWith starts a Cluster shaped by o and waits until every node
// reports cluster_state:ok and every replica is in sync with its master.
func StartClusterWith(t TB, o ClusterOptions) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found on PATH; install it with: %s", InstallHint)
	}
	masters := o.Masters
	if masters == 0 {
		masters = 3
	}
	timeout := o.NodeTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
	}
	if o.PartialCoverage {
		args = append(args, "--cluster-require-full-coverage", "no")
	}
	if o.NoFailover {
		args = append(args, "--cluster-replica-no-failover", "yes")
	}
	n := masters
	if o.Replicas {
		n *= 2
	}
	var all []*Server
	for i := 0; i < n; i++ {
		all = append(all, start(t, serverArgs(args), true, nil))
	}
	create := []string{"--cluster", "create"}
	for _, s := range all {
		create = append(create, s.Addr())
	}
	replicas := "0"
	if o.Replicas {
		replicas = "1"
	}
	create = append(create, "--cluster-replicas", replicas, "--cluster-yes")
	if n == 1 {
		// redis-cli creates Clusters of three masters or more; one node
		// takes every slot itself.
		if _, err := Do(all[0].Addr(), "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v", err)
		}
	} else if out, err := exec.Command("redis-cli", create...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, s := range all {
		waitInfo(t, s, deadline, "CLUSTER", "INFO", "cluster_state:ok")
	}
	c := &Cluster{args: args}
	for _, s := range all {
		if info, _ := Do(s.Addr(), "INFO", "replication"); strings.Contains(info, "role:master") {
			c.Servers = append(c.Servers, s)
		}
	}
	for _, m := range c.Servers {
		for _, s := range all {
			info, _ := Do(s.Addr(), "INFO", "replication")
			if strings.Contains(info, "role:slave") && strings.Contains(info, fmt.Sprintf("master_port:%d", m.Port())) {
				c.Replicas = append(c.Replicas, s)
				waitInfo(t, s, deadline, "INFO", "replication", "master_link_status:up")
			}
		}
	}
	if o.Replicas && len(c.Replicas) != len(c.Servers) {
		t.Fatalf("redistest: %d replicas for %d masters", len(c.Replicas), len(c.Servers))
	}
	return c
}

// waitInfo polls s with the command until its reply contains want.
func waitInfo(t TB, s *Server, deadline time.Time, cmd, section, want string) {
	t.Helper()
	for {
		info, err := Do(s.Addr(), cmd, section)
		if err == nil && strings.Contains(info, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s %s on %s: no %q within %s: %v\n%s", cmd, section, s.Addr(), want, clusterTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond) // polling external processes
	}
}

// WaitPromoted waits until a replica of the killed master m has taken over
// its slots (INFO says role:master) and every live node reports
// cluster_state:ok; it returns the new master. Cluster failover is the
// Cluster's own doing: the wait bounds it by clusterTimeout.
func (c *Cluster) WaitPromoted(t TB, m *Server) *Server {
	t.Helper()
	i := -1
	for j, s := range c.Servers {
		if s == m {
			i = j
		}
	}
	if i < 0 || i >= len(c.Replicas) {
		t.Fatalf("redistest: %s is no master with a replica", m.Addr())
	}
	r := c.Replicas[i]
	deadline := time.Now().Add(clusterTimeout)
	waitInfo(t, r, deadline, "INFO", "replication", "role:master")
	for j, s := range c.Servers {
		if j != i {
			waitInfo(t, s, deadline, "CLUSTER", "INFO", "cluster_state:ok")
		}
	}
	return r
}

// AddMaster starts one more cluster-enabled server, runs setup on it (to
// give it users of its own, say) before it joins, joins it to the Cluster
// and moves slots of the other masters to it (redis-cli --cluster
// add-node, then reshard, which migrates their keys). It returns once every
// master reports cluster_state:ok and sees the new one holding slots; the
// new master is appended to Servers.
func (c *Cluster) AddMaster(t TB, slots int, setup func(*Server)) *Server {
	t.Helper()
	s := start(t, serverArgs(c.args), true, nil)
	if setup != nil {
		setup(s)
	}
	seed := c.Servers[0].Addr()
	if out, err := exec.Command("redis-cli", "--cluster", "add-node", s.Addr(), seed).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster add-node: %v\n%s", err, out)
	}
	id, err := Do(s.Addr(), "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID: %v", err)
	}
	deadline := time.Now().Add(clusterTimeout)
	// reshard needs every node to know the new one and to agree on the
	// configuration first.
	for _, m := range append(c.Servers[:len(c.Servers):len(c.Servers)], c.Replicas...) {
		waitInfo(t, m, deadline, "CLUSTER", "NODES", id)
	}
	for {
		out, err := exec.Command("redis-cli", "--cluster", "check", seed).CombinedOutput()
		if err == nil && strings.Contains(string(out), strings.TrimSpace(id)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the nodes do not agree within %s after add-node: %v\n%s", clusterTimeout, err, out)
		}
		time.Sleep(50 * time.Millisecond) // polling external processes
	}
	out, err := exec.Command("redis-cli", "--cluster", "reshard", seed, "--cluster-from", "all", "--cluster-to", id,
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster reshard: %v\n%s", err, out)
	}
	c.Servers = append(c.Servers, s)
	for _, m := range c.Servers {
		waitInfo(t, m, deadline, "CLUSTER", "INFO", "cluster_state:ok")
		for !holdsSlots(m, id) {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: %s does not see %s holding slots within %s", m.Addr(), s.Addr(), clusterTimeout)
			}
			time.Sleep(20 * time.Millisecond) // polling external processes
		}
	}
	return s
}

// holdsSlots reports whether m's CLUSTER NODES has node id holding slots.
func holdsSlots(m *Server, id string) bool {
	nodes, err := Do(m.Addr(), "CLUSTER", "NODES")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 8 && f[0] == id && f[7] == "connected" {
			return true
		}
	}
	return false
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}

// WaitInfo polls s with INFO section until the reply contains want, for at
// most 30 s (a replica catching up, a failover under way).
func WaitInfo(t TB, s *Server, section, want string) {
	t.Helper()
	waitInfo(t, s, time.Now().Add(clusterTimeout), "INFO", section, want)
}
