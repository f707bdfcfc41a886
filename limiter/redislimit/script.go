package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts read the clock with redis.call("TIME"), so that gateway
// clocks may drift; touch only keys that share one hash tag (one Cluster
// slot); and set an expiry on every key they write, so idle keys vanish by
// themselves. For each check the decision script replies {allowed (0|1),
// remaining, retry_after_us, reset_after_us, extra}, in short where it can
// (see readDecideReply); extra is the fixed window's end in Unix ms (what
// its refund needs) and 0 otherwise. The
// refund scripts give back what an admitted check took (on a Cluster, whose
// checks are decided one slot at a time, and to reconcile a cost later).

// decideScript decides every shared check of one request at once, all or
// nothing: each check is decided against the state as it is, and only when
// all of them admit are they all recorded. So a request that one policy
// denies costs the others nothing, and no refund is ever in flight for
// another request to trip over. Every key of the call must be in one Cluster
// slot, so on a Cluster a request with checks on several keys calls it once
// per check (see roundTrip).
//
// ARGV[1] is the number of checks n, ARGV[2] "record", or "peek" to decide
// and record nothing (what a quota report reads); then per check: its
// algorithm's name, rate, period in microseconds (a lease for
// shared_concurrency), quota (GCRA's burst, a window's count, the slots),
// cost, and a member for an algorithm that keeps one (the arg constants and
// algorithm.member in algorithms.go). KEYS holds each check's keys
// (algorithm.keyNames). A merged call carries a dozen checks or more, and
// each argument is a string Redis parses and Lua copies, so none is sent
// that the algorithm does not read. The reply is each check's (one integer
// or six, see readDecideReply) followed by 1 when the checks were recorded,
// 0 when not.
//
// Each algorithm's Lua is in its own file; dispatchLua puts them together.
var decideSrc = decideHead + `
local K, k, a, groups, many = KEYS, 0, 0, 1, false
` + decideLoop

// decideHead reads Redis's clock, once a call.
const decideHead = `
local t = redis.call("TIME")
local sec, usec = tonumber(t[1]), tonumber(t[2])
local now_us = sec * 1000000 + usec
local gcra_now = (sec - ` + gcraEpoch + `) + (usec / 1000000)
`

// decideLoop decides groups requests (one for decideScript), whose
// arguments follow ARGV[a] and whose keys follow K[k] (KEYS, or ARGV for
// decideManyNodeScript), writing each check's reply and each request's
// recorded flag into the reply. What a call costs Redis before
// its first decision is shared by the decisions merged into it, so it is
// kept small (a Cluster master's calls carry about a third of a standalone
// server's decisions; BenchmarkNodeScriptInstructions counts it): GCRA, the
// common check, is decided inline, not through a function; the other
// algorithms are made only when a call carries them; each number is parsed
// once while the checks repeat it; and a request's records wait in two
// reused tables until all its checks admit: a GCRA record is its key and
// its new TAT (negated: see gcraLua), another algorithm's a function.
//
// In a merged call (many) each group of requests starts with a count,
// times: the group is that many requests in a row with the same keys and
// arguments, sent once and decided times over, one after the other; a
// negative count -times is a group whose requests carry the arguments of
// the group before it (from ga on), with keys of their own. A hot key's
// requests, or many tenants' under one policy, then cost Redis a key or
// nothing each instead of every argument again (see mergeCalls).
var decideLoop = `
local call, ceil, tonumber, argv = redis.call, math.ceil, tonumber, ARGV
local reply, r, tats, rec_f, rec_v = {}, 0, {}, {}, {}
` + fnLocals() + `local n_s, n, rate_s, period_s, emission, burst_s, burst, cost_s, cost
local ga = a
for g = 1, groups do
  local times, own = 1, nil
  if many then
    times, a = tonumber(argv[a + 1]), a + 1
    if times < 0 then times, own, a = -times, a, ga end
  end
  local gk = k
  ga = a
  for rep = 1, times do
  a, k = ga, gk
  if argv[a + 1] ~= n_s then n_s = argv[a + 1]; n = tonumber(n_s) end
  local all, nrec = argv[a + 2] ~= "peek", 0
  a = a + 2
  for i = 1, n do` + dispatchLua() + `  end
  if all then
    for j = 1, nrec do
      local v = rec_v[j]
      if v then tats[rec_f[j]] = v else rec_f[j]() end
    end
  end
  reply[r + 1] = all and 1 or 0
  r = r + 1
  end
  if own then a = own end
end
-- Each TAT the call moved is written once, however many requests moved it.
for key, tat in next, tats do
  if tat < 0 then call("SET", key, -tat, "EX", ceil(-tat - gcra_now)) end
end
return reply
`

// decideManySrc is decideScript for several requests at once: the calls
// that a shared pipeline carries (see coalescer), merged into one, so that
// Redis runs one script and reads its clock once for all of them. Each
// request stays all or nothing on its own, and they are decided in order,
// each seeing what the ones before it recorded: as if called one by one.
// ARGV[1] is the number of groups; then, per group, its count (see
// decideLoop) and, when the count is positive, its requests' decideScript
// arguments (n, mode, then each check's). KEYS are the groups', in order,
// once a group. The reply is each request's, concatenated, as if each had
// been sent alone. It is hand-written because neither go-redis nor
// redis_rate merges script calls: without it Redis runs one script per
// request of a pipeline instead of one for all of them.
var decideManySrc = decideHead + `
local K, k, a, groups, many = KEYS, 0, 1, tonumber(ARGV[1]), true
` + decideLoop

var decideManyScript = redis.NewScript(decideManySrc)

// decideManyNodeSrc is decideManySrc for one Cluster master: the requests'
// keys live in many slots of the master, and a script may declare keys of
// one slot only, so KEYS holds the first key alone (the node checks that it
// holds it) and ARGV starts with the number of keys and the keys
// themselves, read from there; allow-cross-slot-keys lets the script touch
// them (Redis 7).
var decideManyNodeSrc = "#!lua flags=allow-cross-slot-keys\n" + decideHead + `
local nk = tonumber(ARGV[1])
local K, k, a, groups, many = ARGV, 1, nk + 2, tonumber(ARGV[nk + 2]), true
` + decideLoop

var decideManyNodeScript = redis.NewScript(decideManyNodeSrc)

var decideScript = redis.NewScript(decideSrc)

// scriptMode says whether decideScript records what it admits.
type scriptMode string

const (
	modeRecord scriptMode = "record"
	modePeek   scriptMode = "peek"
)

// scriptReply is a decision script's parsed reply.
type scriptReply struct {
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	extra      int64
}

// parseDecideReply reads decideScript's reply for n checks. It checks every
// element's type: a reply of another shape is an error, never a panic.
// The reply is read as integers (an IntSliceCmd: go-redis fails a reply
// with an element of another type), so only its shape is left to check.
func parseDecideReply(v []int64, n int) (replies []scriptReply, recorded bool, err error) {
	replies = make([]scriptReply, n)
	recorded, err = readDecideReply(v, n, func(i int, r scriptReply) { replies[i] = r })
	if err != nil {
		return nil, false, err
	}
	return replies, recorded, nil
}

// fullReply marks a check's reply of five integers (scriptReply's fields
// in order). A check's reply is otherwise one integer, not negative: the
// reset_after_us of a check admitted with nothing else to say (remaining,
// retry and extra 0: what GCRA admits). Each integer of a reply costs
// Redis about 450 instructions to put in the table and write out, and the
// common decision needs one where it took five (BenchmarkNodeScriptInstructions).
const fullReply = -1

// readDecideReply is parseDecideReply handing each check's reply to set
// (what a decision keeps it in) instead of a slice of its own. set is
// called only once the reply's shape has been checked.
func readDecideReply(v []int64, n int, set func(i int, r scriptReply)) (recorded bool, err error) {
	size, err := decideReplyLen(v, n)
	if err == nil && size != len(v) {
		err = fmt.Errorf("reply of %d integers to %d checks: %d more", len(v), n, len(v)-size)
	}
	if err != nil {
		return false, fmt.Errorf("limiter script: %w", err)
	}
	at := 0
	for i := range n {
		if x := v[at]; x != fullReply {
			set(i, scriptReply{allowed: true, resetAfter: time.Duration(x) * time.Microsecond})
			at++
			continue
		}
		set(i, newScriptReply([5]int64(v[at+1:at+6])))
		at += 6
	}
	return v[at] == 1, nil
}

// decideReplyLen returns how many integers at the start of v are the reply
// to one decideScript call of n checks (a merged call's reply is its calls'
// one after the other), or why they cannot be (for its caller to wrap).
func decideReplyLen(v []int64, n int) (int, error) {
	at := 0
	for i := range n {
		if at >= len(v) {
			return 0, fmt.Errorf("reply of %d integers ends within check %d of %d", len(v), i+1, n)
		}
		switch x := v[at]; {
		case x >= 0:
			at++
		case x == fullReply:
			at += 6
		default:
			return 0, fmt.Errorf("check %d of %d: unexpected reply %d", i+1, n, x)
		}
	}
	if at >= len(v) {
		return 0, fmt.Errorf("reply of %d integers to %d checks has no recorded flag", len(v), n)
	}
	return at + 1, nil
}

func newScriptReply(n [5]int64) scriptReply {
	return scriptReply{
		allowed:    n[0] == 1,
		remaining:  max(0, n[1]),
		retryAfter: time.Duration(max(0, n[2])) * time.Microsecond,
		resetAfter: time.Duration(max(0, n[3])) * time.Microsecond,
		extra:      n[4],
	}
}

// exec runs cmds (script calls) and leaves their replies in them: in a
// pipeline shared with concurrent decisions' calls when gathering is on.
// On a Cluster each node's calls go in a pipeline of their own.
func (r *Limiter) exec(ctx context.Context, cmds []redis.Cmder) {
	r.execGrouped(ctx, cmds)
}

// The arguments that every decideScript call carries, boxed once.
var (
	argEvalsha   any = "evalsha"
	argDecideSHA any = decideScript.Hash()
	argRecord    any = string(modeRecord)
	argPeek      any = string(modePeek)
)

func argMode(m scriptMode) any {
	if m == modePeek {
		return argPeek
	}
	return argRecord
}

// evalFirstKey is where an EVAL/EVALSHA command's first key is
// ([name, script, nkeys, keys...]): what a Cluster pipeline routes by.
const evalFirstKey = 3

// newEvalCmd builds EVAL/EVALSHA exactly as go-redis does, including the key
// position a Cluster pipeline routes by.
func newEvalCmd(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(evalFirstKey)
	}
	return cmd
}

// execScripts runs cmds (EVALSHA commands) in one pipeline. Those that fail
// with NOSCRIPT (the script cache is empty after a restart, a failover, a
// SCRIPT FLUSH or on a new Cluster node) run again as EVAL in a second
// pipeline, and their replies are copied into the original commands. It
// reports whether a second pipeline was needed.
func execScripts(ctx context.Context, client Client, sources map[string]string, cmds []redis.Cmder) (reloaded bool) {
	if len(cmds) == 0 {
		return false
	}
	pipe := client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, c) // queues only
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error

	var evals []redis.Cmder
	var copyBack []func()
	for _, c := range cmds {
		if !isNoScript(c.Err()) {
			continue
		}
		args := c.Args()
		if len(args) < 3 {
			continue
		}
		sha, _ := args[1].(string)
		src, ok := sources[sha]
		if !ok {
			continue
		}
		a := make([]any, len(args))
		copy(a, args)
		a[0], a[1] = "eval", src
		if e, back := evalOf(ctx, c, a); e != nil {
			evals, copyBack = append(evals, e), append(copyBack, back)
		}
	}
	if len(evals) == 0 {
		return false
	}
	pipe = client.Pipeline()
	for _, e := range evals {
		_ = pipe.Process(ctx, e)
	}
	_, _ = pipe.Exec(ctx)
	for _, back := range copyBack {
		back()
	}
	return true
}

// evalOf returns the EVAL command of args for c, of c's kind (a decision
// reads its reply as integers, see decideCmdIn), and what copies its reply
// into c; nil for a kind the limiter does not send.
func evalOf(ctx context.Context, c redis.Cmder, args []any) (redis.Cmder, func()) {
	switch c := c.(type) {
	case *redis.IntSliceCmd:
		e := redis.NewIntSliceCmd(ctx, args...)
		e.SetFirstKeyPos(evalFirstKey)
		return e, func() { c.SetVal(e.Val()); c.SetErr(e.Err()) }
	case *redis.Cmd:
		e := redis.NewCmd(ctx, args...)
		e.SetFirstKeyPos(evalFirstKey)
		return e, func() { c.SetVal(e.Val()); c.SetErr(e.Err()) }
	}
	return nil, nil
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
