package h1

import (
	"net"
	"syscall"
)

// peekIdle reports whether an idle connection is still open with nothing to
// read: one non-blocking peek, so that a connection the upstream closed while
// it sat in the pool is dropped before a request is written to it.
func peekIdle(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read (EAGAIN) is the one good answer: n == 0 is the
		// upstream's FIN, n > 0 bytes it sent unasked.
		open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && open
}
