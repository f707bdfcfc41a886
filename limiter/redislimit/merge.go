package redislimit

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// mergeDecides turns the decideScript calls among cmds into one
// decideManyScript call, so that Redis runs one script for all the
// requests of a pipeline; the other commands are left as they are. split
// hands each decideScript call its part of the merged reply, or the merged
// call's error. The calls' keys must be on one server (not a Cluster).
func mergeDecides(cmds []redis.Cmder) (merged []redis.Cmder, split func()) {
	merged, split, _ = mergeCalls(cmds, false)
	return merged, split
}

// mergeNodeDecides is mergeDecides for the calls bound to one Cluster
// master, whose keys live in many slots: the merged call is
// decideManyNodeScript, which declares only the first key (what routes it)
// and reads the others from its arguments. again returns, after split, the
// merged calls when the merged one failed as a whole with a reply (a key
// the node no longer holds: a failover or a resharding under way): they are
// then to be sent unmerged, each redirected to its slot's master.
func mergeNodeDecides(cmds []redis.Cmder) (merged []redis.Cmder, split func(), again func() []redis.Cmder) {
	return mergeCalls(cmds, true)
}

func mergeCalls(cmds []redis.Cmder, node bool) (merged []redis.Cmder, split func(), again func() []redis.Cmder) {
	sha := decideScript.Hash()
	var decides []*redis.IntSliceCmd
	for _, c := range cmds {
		if d, ok := c.(*redis.IntSliceCmd); ok && len(d.Args()) > 3 && d.Args()[0] == "evalsha" && d.Args()[1] == sha {
			decides = append(decides, d)
		} else {
			merged = append(merged, c)
		}
	}
	if len(decides) < 2 {
		return cmds, func() {}, func() []redis.Cmder { return nil }
	}
	// Each call is [evalsha, sha, nkeys, keys..., n, mode, each check's
	// values]. The merged one is [evalsha, sha, nkeys, every group's keys...,
	// groups, then per group its count and, for a positive count, its
	// argv...] (see decideLoop), built in one slice from the calls' own
	// values (no key is boxed again). A call with the keys and argv of the
	// one before it joins its group (a hot key's requests); one with its
	// argv alone starts a group that reuses them (another tenant under the
	// same policy). Only neighbours fold, so the order stays the calls'.
	times := make([]int, 0, len(decides))
	nkeys, nargs := 0, 1
	for i, c := range decides {
		a := c.Args()
		k, _ := a[2].(int)
		switch {
		case i > 0 && sameArgs(decides[i-1].Args(), a):
			if times[len(times)-1] < 0 {
				times[len(times)-1]--
			} else {
				times[len(times)-1]++
			}
			continue
		case i > 0 && sameArgv(decides[i-1].Args(), a):
			times = append(times, -1)
			nargs++
		default:
			times = append(times, 1)
			nargs += 1 + len(a) - 3 - k
		}
		nkeys += k
	}
	a := make([]any, 0, 5+nkeys+nargs)
	if node {
		first, _ := decides[0].Args()[3].(string)
		a = append(a, "evalsha", decideManyNodeScript.Hash(), 1, first, nkeys)
	} else {
		a = append(a, "evalsha", decideManyScript.Hash(), nkeys)
	}
	for g, i := 0, 0; g < len(times); g++ {
		ca := decides[i].Args()
		k, _ := ca[2].(int)
		a = append(a, ca[3:3+k]...)
		i += abs(times[g])
	}
	a = append(a, len(times))
	for g, i := 0, 0; g < len(times); g++ {
		ca := decides[i].Args()
		k, _ := ca[2].(int)
		a = append(a, times[g])
		if times[g] > 0 {
			a = append(a, ca[3+k:]...)
		}
		i += abs(times[g])
	}
	checks := make([]int, len(decides))
	for i, c := range decides {
		ca := c.Args()
		k, _ := ca[2].(int)
		checks[i], _ = ca[3+k].(int)
	}
	many := redis.NewIntSliceCmd(context.Background(), a...)
	if nkeys > 0 {
		many.SetFirstKeyPos(evalFirstKey)
	}
	merged = append(merged, many)
	var failed bool
	return merged, func() {
			arr, err := many.Result()
			if node && err != nil && isReply(err) {
				failed = true
				return
			}
			// Each call's part of the reply is as long as its checks'
			// replies make it (see readDecideReply), so the parts are
			// found one after the other, and checked whole before any is
			// handed over.
			sizes, at := make([]int, len(checks)), 0
			for i := 0; err == nil && i < len(checks); i++ {
				if sizes[i], err = decideReplyLen(arr[at:], checks[i]); err == nil {
					at += sizes[i]
				}
			}
			if err == nil && at != len(arr) {
				err = fmt.Errorf("%d integers, %d more than theirs", len(arr), len(arr)-at)
			}
			if err != nil && many.Err() == nil {
				err = fmt.Errorf("limiter script: unexpected reply to %d merged calls: %w", len(decides), err)
			}
			at = 0
			for i, c := range decides {
				if err != nil {
					c.SetErr(err)
					continue
				}
				c.SetVal(arr[at : at+sizes[i] : at+sizes[i]])
				at += sizes[i]
			}
		}, func() []redis.Cmder {
			if !failed {
				return nil
			}
			again := make([]redis.Cmder, len(decides))
			for i, d := range decides {
				again[i] = d
			}
			return again
		}
}

// sameArgs says whether two decideScript calls carry the same keys and
// arguments: the same request, decided again.
func sameArgs(x, y []any) bool {
	return len(x) == len(y) && sameValues(x[2:], y[2:])
}

// sameArgv says whether two decideScript calls carry the same arguments
// (after their keys), whatever their keys: the same checks of one policy
// on other keys.
func sameArgv(x, y []any) bool {
	kx, _ := x[2].(int)
	ky, _ := y[2].(int)
	return kx == ky && len(x) == len(y) && sameValues(x[3+kx:], y[3+ky:])
}

// sameValues compares arguments as go-redis writes them: a *int64 (how
// decideCmdIn passes a check's numbers) by its value. Any other type is
// never the same, so a call it carries is sent whole.
func sameValues(x, y []any) bool {
	for i := range x {
		switch a := x[i].(type) {
		case string:
			if b, ok := y[i].(string); !ok || a != b {
				return false
			}
		case int:
			if b, ok := y[i].(int); !ok || a != b {
				return false
			}
		case *int64:
			if b, ok := y[i].(*int64); !ok || *a != *b {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
