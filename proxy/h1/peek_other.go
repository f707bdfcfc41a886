//go:build !linux

package h1

import "net"

// peekIdle cannot look at an idle connection here without a read that
// blocks; a closed one is found when the request is written or answered, and
// replayable requests are sent again.
func peekIdle(net.Conn) bool { return true }
