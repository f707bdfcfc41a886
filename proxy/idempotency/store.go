// Package idempotency keeps the state behind idempotency keys: who is
// working on a key now (a lock with a fencing token) and the response a
// finished request left for its duplicates. Local keeps it in the process;
// Redis shares it between gateway instances, on the locks of redislock.
//
// The store knows nothing of HTTP: the proxy builds the key (scope, method,
// path and the client's key), compares fingerprints and renders answers.
package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Store holds idempotency keys. Implementations are safe for concurrent use.
type Store interface {
	// Begin claims key for one request. The Claim has either an Owner (the
	// request is the first: forward it, then Complete or Abort), a Record (a
	// request with this key finished: replay it), or neither (another
	// request owns the key now). t says how long owners and records last.
	Begin(ctx context.Context, key string, t Terms) (Claim, error)
	// Wait returns when the holder of key may have finished, so that Begin
	// is worth calling again, or with ctx's error when ctx ends first.
	Wait(ctx context.Context, key string) error
}

// Terms are the durations a key is held and remembered for.
type Terms struct {
	// LockTTL is how long an owner keeps the key when it stops renewing its
	// lock (a crashed instance); a live owner renews it.
	LockTTL time.Duration
	// ReplayTTL is how long a finished request's record is replayed.
	ReplayTTL time.Duration
}

// Claim is what Begin found.
type Claim struct {
	Owner  Owner
	Record *Record
}

// Busy reports whether another request owns the key.
func (c Claim) Busy() bool { return c.Owner == nil && c.Record == nil }

// Owner is the one request that owns a key until it completes or aborts.
// (It is named apart from the limiter's Reservation, which is what a request
// took from its rate limits.)
type Owner interface {
	// Fence is the fencing token of this owner: larger than that of every
	// earlier owner of the same key, so that an upstream that remembers the
	// largest it has seen can refuse a stale owner.
	Fence() int64
	// Lost returns a non-nil error once the key is known to be lost (its
	// lock expired while the owner worked and may be someone else's).
	Lost() error
	// Complete stores rec for the ReplayTTL of the owner's Terms and
	// releases the key, but only if the owner still holds its lock: a stale
	// owner's record is not stored (ErrLost).
	Complete(ctx context.Context, rec *Record) error
	// Abort releases the key without a record, so that the client may
	// retry.
	Abort(ctx context.Context) error
}

// ErrLost is returned by Complete when the owner had lost the key.
var ErrLost = errors.New("idempotency: key no longer held")

// ErrFull is returned by Local.Begin when it holds as many keys as it may
// and none of them can be dropped.
var ErrFull = errors.New("idempotency: store full")

// Record is a finished request's response as its duplicates get it.
type Record struct {
	// Fingerprint identifies the request that left the record (method, path
	// and body); a duplicate with another fingerprint is a different
	// request under a reused key.
	Fingerprint [32]byte `json:"fp"`
	Status      int      `json:"status"`
	// Header holds the response headers chosen for replay.
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Partial is true when the body was not kept (larger than the cap, or
	// not read to its end): duplicates learn the request was done, but
	// cannot get its response again.
	Partial bool `json:"partial,omitempty"`
}
