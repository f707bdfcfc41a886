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
	// Each call is [evalsha, sha, nkeys, keys..., n, mode, each check's values]; the
	// merged one is [evalsha, sha, all nkeys, every key..., calls, every
	// call's argv...], built in one slice from the calls' own values (no
	// key is boxed again).
	nkeys, nargs := 0, 1
	for _, c := range decides {
		a := c.Args()
		k, _ := a[2].(int)
		nkeys += k
		nargs += len(a) - 3 - k
	}
	a := make([]any, 0, 5+nkeys+nargs)
	if node {
		first, _ := decides[0].Args()[3].(string)
		a = append(a, "evalsha", decideManyNodeScript.Hash(), 1, first, nkeys)
	} else {
		a = append(a, "evalsha", decideManyScript.Hash(), nkeys)
	}
	for _, c := range decides {
		ca := c.Args()
		k, _ := ca[2].(int)
		a = append(a, ca[3:3+k]...)
	}
	a = append(a, len(decides))
	sizes := make([]int, len(decides))
	for i, c := range decides {
		ca := c.Args()
		k, _ := ca[2].(int)
		argv := ca[3+k:]
		n, _ := argv[0].(int)
		sizes[i] = 5*n + 1
		a = append(a, argv...)
	}
	many := redis.NewIntSliceCmd(context.Background(), a...)
	if nkeys > 0 {
		many.SetFirstKeyPos(evalFirstKey)
	}
	merged = append(merged, many)
	var failed bool
	return merged, func() {
			arr, err := many.Result()
			if err == nil && len(arr) != sum(sizes) {
				err = fmt.Errorf("limiter script: unexpected reply to %d merged calls: %d integers", len(decides), len(arr))
			}
			if node && err != nil && isReply(err) {
				failed = true
				return
			}
			at := 0
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

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
