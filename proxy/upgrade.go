package proxy

import (
	"context"
	"io"
	"sync"
)

// upgrades tracks the upgraded (101 Switching Protocols, e.g. WebSocket)
// connections the Handler proxies. http.Server.Shutdown does not see them:
// ReverseProxy hijacks the client connection, so without this a shutdown
// would leave them to be cut by the process exit, unannounced. It is safe for
// concurrent use.
type upgrades struct {
	mu      sync.Mutex
	conns   map[*upgradedConn]struct{}
	closing bool
	idle    chan struct{} // closed when conns empties while closing
}

// upgradedConn is the upstream side of an upgraded connection, as
// ReverseProxy copies to and from it. Closing it ends the copy both ways,
// and ReverseProxy then closes the client's side.
type upgradedConn struct {
	io.ReadWriteCloser
	owner *upgrades
	once  sync.Once
}

func (c *upgradedConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.once.Do(func() { c.owner.forget(c) })
	return err
}

// track registers rwc; after shutdown has begun it is still tracked and cut
// with the rest.
func (u *upgrades) track(rwc io.ReadWriteCloser) io.ReadWriteCloser {
	c := &upgradedConn{ReadWriteCloser: rwc, owner: u}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conns == nil {
		u.conns = make(map[*upgradedConn]struct{})
	}
	u.conns[c] = struct{}{}
	return c
}

func (u *upgrades) forget(c *upgradedConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.conns, c)
	if u.closing && len(u.conns) == 0 && u.idle != nil {
		close(u.idle)
		u.idle = nil
	}
}

// shutdown waits until every tracked connection has closed or ctx is done,
// then closes what is left and returns how many it closed.
func (u *upgrades) shutdown(ctx context.Context) int {
	u.mu.Lock()
	u.closing = true
	if len(u.conns) == 0 {
		u.mu.Unlock()
		return 0
	}
	if u.idle == nil {
		u.idle = make(chan struct{})
	}
	idle := u.idle
	u.mu.Unlock()

	select {
	case <-idle:
		return 0
	case <-ctx.Done():
	}
	u.mu.Lock()
	left := make([]*upgradedConn, 0, len(u.conns))
	for c := range u.conns {
		left = append(left, c)
	}
	u.mu.Unlock()
	for _, c := range left {
		c.Close()
	}
	return len(left)
}

// Shutdown waits for the upgraded (101 Switching Protocols, e.g. WebSocket)
// connections the Handler proxies to end, until ctx is done; then it closes
// the ones left and returns how many it cut. http.Server.Shutdown does not
// wait for these (they are hijacked), so call Shutdown beside it with the
// same deadline. Upgrades that start afterwards are tracked and cut by a
// later call. It is safe for concurrent use.
func (h *Handler) Shutdown(ctx context.Context) (cut int) {
	return h.upgrades.shutdown(ctx)
}
