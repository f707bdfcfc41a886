package h1

import (
	"net"
	"syscall"
)

// peeker looks at an idle connection without reading from it: one
// non-blocking peek, so that a connection the upstream closed while it sat
// in the pool is dropped before a request is written to it. What it needs is
// built once per connection, so that a peek allocates nothing.
type peeker struct {
	raw  syscall.RawConn // nil: not a socket (a test's conn), never peeked
	open bool
	fn   func(fd uintptr) bool
}

func (p *peeker) init(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.raw = raw
	p.fn = func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read (EAGAIN) is the one good answer: n == 0 is the
		// upstream's FIN, n > 0 bytes it sent unasked.
		p.open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	}
}

// idle reports whether the connection is still open with nothing to read.
func (p *peeker) idle() bool {
	if p.raw == nil {
		return true
	}
	p.open = false
	return p.raw.Read(p.fn) == nil && p.open
}
