package redislimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimit-gateway/gateway/limiter"
)

var _ limiter.Resetter = (*Limiter)(nil)

// Reset implements limiter.Resetter: the check's key starts afresh under its
// policy. It deletes every key any shared algorithm keeps for (policy, key)
// (see stateKeys), whatever the policy's algorithm is now, so state left by
// an algorithm the policy used before a reload goes too; and it forgets the
// key's cached denials under every limit. (The key's in-process fallback
// share is the Engine's to reset.) Only c.Rule.Name and c.Key matter.
//
// The keys go in one DEL (they share one hash tag, so one Cluster slot),
// bounded by the longer of the timeout and the breaker cooldown: an
// operator's reset is no request's deadline. It does not feed the breaker.
// Requests holding shared_concurrency leases of the key keep running: their
// renewals find the lease gone (logged) and their release removes nothing,
// so until they end the key may have up to twice its limit in flight.
func (r *Limiter) Reset(ctx context.Context, c limiter.Check) error {
	if c.Rule == nil {
		return errors.New("limiter: reset without policy")
	}
	d := digestKey(c.Key)
	release, err := r.slots.acquire(ctx, r.queueTimeout)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, max(r.timeout, r.cooldown))
		err = r.client.Del(ctx, stateKeys(c.Rule.Name, d)...).Err()
		cancel()
		release()
	}
	// Forgotten after the DEL, so that a denial cached from a round trip
	// that ran before it cannot outlive the reset.
	r.denials.forgetAll(c.Rule.Name, d)
	if err != nil {
		return fmt.Errorf("deleting the key's state on redis: %w", err)
	}
	return nil
}

// stateKeys returns the name of every key the shared algorithms keep for
// (policy, digest), whatever the policy's algorithm is now (it may have
// been another before a reload): each algorithm's keys as decideAll
// names them (algorithm.keyNames). TestResetKeysAreEveryKeyTheAlgorithmsWrite
// checks them against what the algorithms write.
func stateKeys(policy string, d keyDigest) []string {
	base := redisBaseKey(policy, d)
	var keys []string
	for _, alg := range algorithms {
		keys = append(keys, alg.keyNames(base)...)
	}
	return keys
}

// forgetAll drops every denial remembered for (policy, digest), under any
// limit: after a reset the key owes nothing under any plan.
func (c *denialCache) forgetAll(policy string, d keyDigest) {
	c.m.DeleteFunc(func(k denialKey, _ denial) bool { return k.policy == policy && k.key == d })
}
