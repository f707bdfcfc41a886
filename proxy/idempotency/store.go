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
	// Begin claims key for one request. The Claim holds either a Hold (the
	// request is the first: forward it, then Complete or Abort), a Record (a
	// request with this key finished: replay it), or neither (another
	// request holds the key now). t says how long holds and records last.
	Begin(ctx context.Context, key string, t Terms) (Claim, error)
	// Wait returns when the holder of key may have finished, so that Begin
	// is worth calling again, or with ctx's error when ctx ends first.
	Wait(ctx context.Context, key string) error
}

// Terms are the durations a key is held and remembered for.
type Terms struct {
	// LockTTL is how long a hold lasts when its holder stops renewing it (a
	// crashed instance); a live holder renews it.
	LockTTL time.Duration
	// ReplayTTL is how long a finished request's record is replayed.
	ReplayTTL time.Duration
}

// Claim is what Begin found.
type Claim struct {
	Hold   Hold
	Record *Record
}

// Busy reports whether another request holds the key.
func (c Claim) Busy() bool { return c.Hold == nil && c.Record == nil }

// Hold is one request's claim on a key.
type Hold interface {
	// Fence is the fencing token of this hold: larger than that of every
	// earlier hold of the same key, so that an upstream that remembers the
	// largest it has seen can refuse a stale holder.
	Fence() int64
	// Lost returns a non-nil error once the hold is known to be lost (its
	// lock expired while the holder worked and may be someone else's).
	Lost() error
	// Complete stores rec for the ReplayTTL of the hold's Terms and
	// releases the key, but only if the hold still holds it: a stale
	// holder's record is not stored (ErrLost).
	Complete(ctx context.Context, rec *Record) error
	// Abort releases the key without a record, so that the client may
	// retry.
	Abort(ctx context.Context) error
}

// ErrLost is returned by Complete when the hold had been lost.
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
