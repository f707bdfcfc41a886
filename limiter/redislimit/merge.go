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
		return cmds, func() {}
	}
	// Each call is [evalsha, sha, nkeys, keys..., n, mode, 6n values].
	var keys []string
	args := []any{len(decides)}
	sizes := make([]int, len(decides))
	for i, c := range decides {
		a := c.Args()
		nkeys, _ := a[2].(int)
		for _, k := range a[3 : 3+nkeys] {
			keys = append(keys, k.(string))
		}
		argv := a[3+nkeys:]
		n, _ := argv[0].(int)
		sizes[i] = 5*n + 1
		args = append(args, argv...)
	}
	many := newEvalCmd(context.Background(), "evalsha", decideManyScript.Hash(), keys, args)
	merged = append(merged, many)
	return merged, func() {
		v, err := many.Result()
		var arr []any
		if err == nil {
			var ok bool
			if arr, ok = v.([]any); !ok || len(arr) != sum(sizes) {
				err = fmt.Errorf("limiter script: unexpected reply to %d merged calls: %T of %d", len(decides), v, len(arr))
			}
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
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
