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
func mergeDecides(cmds []*redis.Cmd) (merged []*redis.Cmd, split func()) {
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
func mergeNodeDecides(cmds []*redis.Cmd) (merged []*redis.Cmd, split func(), again func() []*redis.Cmd) {
	return mergeCalls(cmds, true)
}

func mergeCalls(cmds []*redis.Cmd, node bool) (merged []*redis.Cmd, split func(), again func() []*redis.Cmd) {
	sha := decideScript.Hash()
	var decides []*redis.Cmd
	for _, c := range cmds {
		if a := c.Args(); len(a) > 3 && a[0] == "evalsha" && a[1] == sha {
			decides = append(decides, c)
		} else {
			merged = append(merged, c)
		}
	}
	if len(decides) < 2 {
		return cmds, func() {}, func() []*redis.Cmd { return nil }
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
	many := redis.NewCmd(context.Background(), a...)
	if nkeys > 0 {
		many.SetFirstKeyPos(evalFirstKey)
	}
	merged = append(merged, many)
	var failed bool
	return merged, func() {
			v, err := many.Result()
			var arr []any
			if err == nil {
				var ok bool
				if arr, ok = v.([]any); !ok || len(arr) != sum(sizes) {
					err = fmt.Errorf("limiter script: unexpected reply to %d merged calls: %T of %d", len(decides), v, len(arr))
				}
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
		}, func() []*redis.Cmd {
			if failed {
				return decides
			}
			return nil
		}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
