package redislimit

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// The table is the only list of shared algorithms: it holds exactly the
// algorithms limiter calls shared, and the script dispatches each once.
func TestAlgorithmsTableIsEveryShared(t *testing.T) {
	for _, name := range limiter.Algorithms {
		if got, want := algorithmOf(name) != nil, name.Shared(); got != want {
			t.Errorf("%s: in the table %v, want %v (limiter's Shared)", name, got, want)
		}
	}
	if got, want := len(algorithms), 0; got == want {
		t.Fatal("got an empty table")
	}
	for _, a := range algorithms {
		if !a.name.Shared() {
			t.Errorf("%s is in the table but not shared", a.name)
		}
		if n := strings.Count(decideSrc, `alg == "`+string(a.name)+`"`); n != 1 {
			t.Errorf("%s: the script dispatches it %d times, want 1", a.name, n)
		}
		if a.settle == nil || a.lua == "" || len(a.suffixes) == 0 {
			t.Errorf("%s: an entry without its Lua, settle or keys", a.name)
		}
		if a.prefix != "" && (len(a.suffixes) != 1 || a.suffixes[0] != "") {
			t.Errorf("%s: a prefix goes with one key of no suffix (Decide builds it in one string), got %q", a.name, a.suffixes)
		}
		if !a.inline && !strings.Contains(a.lua, "local function decide(") {
			t.Errorf("%s: its Lua defines no decide", a.name)
		}
	}
}

// A check's arguments are what its algorithm's branch skips: the script
// would otherwise read the next check's arguments as this one's.
func TestCheckArgumentsAreWhatTheScriptSkips(t *testing.T) {
	for _, a := range algorithms {
		op := &sharedOp{check: limiter.Check{Rule: &limiter.Rule{Name: "p", Algorithm: a.name}, Limit: limiter.Limit{Rate: 1, Period: 1e9}},
			cost: 1, base: redisBaseKey("p", digestKey("k")), memberID: "m"}
		cmd, err := decideCmd(t.Context(), []*sharedOp{op}, modeRecord)
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		args := cmd.Args()
		nkeys := args[2].(int)
		if got, want := nkeys, len(a.suffixes); got != want {
			t.Errorf("%s: got %d keys, want %d", a.name, got, want)
		}
		argv := args[evalFirstKey+nkeys:]
		if got, want := len(argv)-2, a.argc(); got != want {
			t.Errorf("%s: got %d arguments, want %d", a.name, got, want)
		}
		branch := dispatchLua()
		branch = branch[strings.Index(branch, `alg == "`+string(a.name)+`"`):]
		if end := strings.Index(branch[1:], `alg == "`); end >= 0 {
			branch = branch[:end+1]
		}
		skip := "a, k = a + " + strconv.Itoa(len(argv)-2) + ", k + " + strconv.Itoa(nkeys)
		if !strings.Contains(branch, skip) {
			t.Errorf("%s: its branch does not skip %q:\n%s", a.name, skip, branch)
		}
	}
}
