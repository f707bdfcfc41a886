// Package redislock is a lock on Redis that holds where naive locks fail:
// a holder that runs past its TTL, a late unlock that would delete the next
// holder's lock, a paused process that wakes up believing it still holds it.
//
// Acquire is one script call: SET key <random token> NX PX ttl and, in the
// same script, the next fencing token: the larger of the resource's counter
// plus one and Redis's clock in microseconds, stored as the new counter. So
// every acquisition comes with a token larger than any before it, even
// after Redis lost the counter (a restart without persistence). Release is a compare-and-
// delete and renewal a compare-and-PEXPIRE: only the holder's token can do
// either. A watchdog renews the lock every ttl/3 while its holder works and
// cancels the lock's Context when it finds the lock lost.
//
// The TTL and the tokens run on Redis's clock; no gateway timestamp is
// written to Redis.
// The two keys of a resource share one hash tag, so the package works on
// Redis Cluster as on a standalone server.
//
// A lock alone cannot guarantee mutual exclusion: a process paused past its
// TTL (GC, SIGSTOP, a slow disk) or a failover that loses the lock key lets
// two holders run at once. The fencing token is what lets the protected
// resource refuse the stale one; a database unique constraint remains the
// last guard. The package knows nothing about HTTP.
//
// It is a library of its own, not part of the rate limiter: it decides
// nothing about limits, and the gateway's idempotency store
// (proxy/idempotency) is its only user there; Go code that needs a lock
// with fencing can import it alone.
package redislock
