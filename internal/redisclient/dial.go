package redisclient

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"
	"time"
)

// redisDialer dials Redis like go-redis's own dialer (TCP, then TLS when
// tlsCfg is set), with one difference: a failed dial is handed back as a
// connection that fails on first use instead of as a dial error.
//
// Why: go-redis counts dial errors per pool and, once they reach PoolSize,
// stops dialing and re-dials in the background only once a second. A long
// Redis outage probed by the circuit breaker reaches that count, and then
// enforcement would resume up to a second after Redis is back, plus the
// breaker's cooldown. With the error surfacing on the connection's first
// write, the command still fails at once with the dial error, the bad
// connection is discarded, and the breaker alone decides when to try again.
func redisDialer(timeout time.Duration, tlsCfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	td := &tls.Dialer{NetDialer: nd, Config: tlsCfg}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		var err error
		if tlsCfg == nil {
			conn, err = nd.DialContext(ctx, network, addr)
		} else {
			conn, err = td.DialContext(ctx, network, addr) // ServerName defaults to addr's host
		}
		if err != nil {
			return failedConn{err: err}, nil
		}
		return conn, nil
	}
}

// failedConn is a connection whose dial failed: every read and write returns
// the dial error. go-redis dials in the background and keeps a dialed
// connection that its caller no longer waits for as idle, so a failedConn
// can sit in the pool after Redis is back; SyscallConn failing is what
// go-redis's health check on every checkout reads as "dead, discard it", so
// no request after the outage fails on a stale dial error.
type failedConn struct{ err error }

func (c failedConn) SyscallConn() (syscall.RawConn, error) { return nil, c.err }

func (c failedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c failedConn) Close() error                     { return nil }
func (c failedConn) LocalAddr() net.Addr              { return failedAddr{} }
func (c failedConn) RemoteAddr() net.Addr             { return failedAddr{} }
func (c failedConn) SetDeadline(time.Time) error      { return nil }
func (c failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c failedConn) SetWriteDeadline(time.Time) error { return nil }

type failedAddr struct{}

func (failedAddr) Network() string { return "tcp" }
func (failedAddr) String() string  { return "dial-failed" }
