package redistest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DelayProxy is a TCP proxy on loopback in front of one server that holds
// each reply chunk for a delay it is told (zero at first): a slow server,
// as its clients see it. A Cluster node announces it with
// Cluster.AnnounceVia. Safe for concurrent use.
type DelayProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // ns
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// StartDelayProxy listens on a free loopback port and forwards every
// connection to target until the test ends.
func StartDelayProxy(t TB, target string) *DelayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: delay proxy: %v", err)
	}
	p := &DelayProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Port is the proxy's port.
func (p *DelayProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Addr is "127.0.0.1:port" of the proxy.
func (p *DelayProxy) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.Port()) }

// SetDelay sets how long each reply chunk is held from now on.
func (p *DelayProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // requests go at once
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			s.Close()
		}()
		go func() { // replies are held
			defer p.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if d := time.Duration(p.delay.Load()); d > 0 {
						time.Sleep(d) // the slowness being simulated
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
	}
}

func (p *DelayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// AnnounceVia makes master m announce port instead of its own (its
// cluster-announce-port; the bus port stays its own) and waits until every
// master names it so: clients that load the slot map from then
// on reach m through port.
func (c *Cluster) AnnounceVia(t TB, m *Server, port int) {
	t.Helper()
	if _, err := m.Do("CONFIG", "SET", "cluster-announce-bus-port", strconv.Itoa(m.Port()+10000)); err != nil {
		t.Fatalf("redistest: cluster-announce-bus-port: %v", err)
	}
	if _, err := m.Do("CONFIG", "SET", "cluster-announce-port", strconv.Itoa(port)); err != nil {
		t.Fatalf("redistest: cluster-announce-port: %v", err)
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, s := range c.Servers {
		waitInfo(t, s, deadline, "CLUSTER", "NODES", ":"+strconv.Itoa(port)+"@")
	}
}
