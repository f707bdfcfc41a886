package redislimit

import (
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// algorithm is one shared algorithm: all that Decide, settling, Reset, the
// health probe and explain know of it. The algorithms table is the only list
// of them: the decision script's dispatch (dispatchLua) and a check's
// arguments (decideCmdIn) are both built from it, so the order of a check's
// arguments is stated once, by the arg constants below.
type algorithm struct {
	name limiter.Algorithm
	arg  any // name, boxed once: what the script's dispatch compares
	// prefix and suffixes name its keys under a check's base key
	// (keyNames): one key a suffix, in the order its Lua takes them.
	prefix   string
	suffixes []string
	// member: a check's arguments end with its member (a log entry, a
	// lease holder: see sharedOp.member).
	member bool
	// lua decides one check. Unless inline, it is a chunk that defines
	// "local function decide(keys..., quota, period_us, cost[, member])"
	// returning ok (0|1), remaining, retry_us, reset_us, extra and the
	// function that records the check; it is made only when a call carries
	// the algorithm. An inline one (GCRA, the common check) is decideLoop's
	// branch itself, reading the loop's locals and the arg placeholders.
	lua    string
	inline bool
	// settle returns the script call that makes an admitted check hold
	// units instead of op.cost (delta = units - op.cost, not 0), or a nil
	// script when there is nothing to move.
	settle func(op *sharedOp, units, delta int64) (script *redis.Script, keys []string, args []any)
	// scripts are the algorithm's other scripts (settling, renewing), kept
	// by hash to load them again after NOSCRIPT.
	scripts []scriptSource
	// remaining, when not nil, derives a decision's remaining units from
	// its reset time, in place of the script's.
	remaining func(l limiter.Limit, resetAfter time.Duration) int64
}

// scriptSource is a script and its source.
type scriptSource struct {
	script *redis.Script
	src    string
}

// algorithms lists the shared algorithms, the common one first (the
// script's dispatch tries them in this order). Adding one touches three
// files: its name in limiter (an Algorithm, and Shared), a file of its own
// here (its Lua and its settle), and its entry below.
var algorithms = []*algorithm{
	{
		name: limiter.GCRA, prefix: gcraKeyPrefix, suffixes: []string{""},
		lua: gcraLua, inline: true, settle: gcraSettle,
		scripts:   []scriptSource{{gcraAdjustScript, gcraAdjustSrc}},
		remaining: gcraRemaining,
	},
	{
		name: limiter.SlidingWindow, suffixes: []string{slidingLogSuffix, slidingSumSuffix}, member: true,
		lua: slidingLua, settle: slidingSettle,
		scripts: []scriptSource{{slidingAdjustScript, slidingAdjustSrc}},
	},
	{
		name: limiter.FixedWindow, suffixes: []string{fixedSuffix},
		lua: fixedLua, settle: fixedSettle,
		scripts: []scriptSource{{fixedAdjustScript, fixedAdjustSrc}},
	},
	{
		name: limiter.SharedConcurrency, suffixes: []string{concurrencySuffix}, member: true,
		lua: concurrencyLua, settle: concurrencySettle,
		scripts: []scriptSource{{concurrencyReleaseScript, concurrencyReleaseSrc}, {concurrencyRenewScript, concurrencyRenewSrc}},
	},
}

func init() {
	for _, a := range algorithms {
		a.arg = string(a.name)
	}
}

// algorithmOf returns name's entry, or nil for an algorithm that keeps no
// state in Redis.
func algorithmOf(name limiter.Algorithm) *algorithm {
	for _, a := range algorithms {
		if a.name == name {
			return a
		}
	}
	return nil
}

// keyNames returns the keys a check of a reads and writes under base, in
// the order its Lua takes them.
func (a *algorithm) keyNames(base string) []string {
	keys := make([]string, len(a.suffixes))
	for i, s := range a.suffixes {
		keys[i] = a.prefix + base + s
	}
	return keys
}

// A check's arguments to the decision script, after its algorithm's name:
// numbers sent in this order (sharedOp.nums), then its member when its
// algorithm has one. The Lua reads them by the placeholders of argLua.
const (
	argRate = iota
	argPeriod
	argQuota
	argCost
	numArgs
)

// argc is how many arguments a check of a sends, its name included.
func (a *algorithm) argc() int {
	if a.member {
		return 2 + numArgs
	}
	return 1 + numArgs
}

// argLua replaces the placeholders {rate}, {period}, {quota}, {cost} and
// {member} of a check's Lua by where decideLoop finds them (argv[a + 1] is
// the algorithm's name).
var argLua = strings.NewReplacer(
	"{rate}", argvAt(argRate),
	"{period}", argvAt(argPeriod),
	"{quota}", argvAt(argQuota),
	"{cost}", argvAt(argCost),
	"{member}", argvAt(numArgs),
)

func argvAt(i int) string { return "argv[a + " + strconv.Itoa(i+2) + "]" }

// dispatchLua is decideLoop's body for one check: each algorithm's branch,
// in the table's order, ending with the arguments and keys it read skipped.
func dispatchLua() string {
	var b strings.Builder
	b.WriteString("\n    local alg = argv[a + 1]\n")
	var rest []*algorithm
	for _, a := range algorithms {
		if !a.inline {
			rest = append(rest, a)
			continue
		}
		b.WriteString("    if alg == \"" + string(a.name) + "\" then" + argLua.Replace(a.lua) + "\n")
		b.WriteString("      " + skipLua(a) + "\n    else\n")
	}
	b.WriteString(argLua.Replace(`      local ok, left, retry, reset, extra, f
      local period, quota, c = tonumber({period}), tonumber({quota}), tonumber({cost})
`))
	for i, a := range rest {
		fn := "alg" + strconv.Itoa(i+1)
		kw := "elseif"
		if i == 0 {
			kw = "if"
		}
		b.WriteString("      " + kw + " alg == \"" + string(a.name) + "\" then\n")
		b.WriteString("        if not " + fn + " then" + a.lua + "\n        " + fn + " = decide end\n")
		call := "        ok, left, retry, reset, extra, f = " + fn + "("
		for k := range a.suffixes {
			call += "K[k + " + strconv.Itoa(k+1) + "], "
		}
		call += "quota, period, c"
		if a.member {
			call += ", {member}"
		}
		b.WriteString(argLua.Replace(call) + ")\n")
		b.WriteString("        " + skipLua(a) + "\n")
	}
	b.WriteString(`      else
        error("unknown algorithm " .. tostring(alg))
      end
      if ok == 0 then
        all = false
      else
        nrec = nrec + 1
        rec_f[nrec], rec_v[nrec] = f, false
      end
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6] = -1, ok, left, retry, reset, extra
      r = r + 6
`)
	for _, a := range algorithms {
		if a.inline {
			b.WriteString("    end\n")
		}
	}
	return b.String()
}

// skipLua moves decideLoop past a check of a: its arguments and its keys.
func skipLua(a *algorithm) string {
	return "a, k = a + " + strconv.Itoa(a.argc()) + ", k + " + strconv.Itoa(len(a.suffixes))
}

// fnLocals declares the functions the non-inline algorithms' branches
// make: one local a branch, nil until a call carries it.
func fnLocals() string {
	var names []string
	for _, a := range algorithms {
		if !a.inline {
			names = append(names, "alg"+strconv.Itoa(len(names)+1))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "local " + strings.Join(names, ", ") + "\n"
}
