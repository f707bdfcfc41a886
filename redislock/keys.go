package redislock

import (
	"crypto/sha256"
	"encoding/hex"
)

// Keys returns the lock key "lock:{<digest>}" and the fencing counter
// "lock:{<digest>}:fence" of a resource. The digest is the first 16 bytes of
// the resource's SHA-256 in hex: fixed size, and no byte of a user-supplied
// name ("{", CR, LF, megabytes) reaches Redis. The shared hash tag puts both
// keys in one Cluster slot, which a script touching both needs. A caller that
// keeps keys of its own beside a lock (a record written under it) names them
// by appending to the lock key, which puts them in the same slot.
func Keys(resource string) (lock, fence string) {
	sum := sha256.Sum256([]byte(resource))
	b := make([]byte, 0, len("lock:{")+32+len("}:fence"))
	b = append(b, "lock:{"...)
	b = hex.AppendEncode(b, sum[:16])
	b = append(b, '}')
	lock = string(b)
	return lock, lock + ":fence"
}
