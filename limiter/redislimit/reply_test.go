package redislimit

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// A decision's reply is one integer for a check admitted with nothing else
// to say, six for any other, then the recorded flag; a reply of any other
// shape is an error that names what is wrong, and no check's reply is
// handed over from it.
func TestReadDecideReply(t *testing.T) {
	full := func(allowed bool, remaining int64, retry, reset time.Duration, extra int64) scriptReply {
		return scriptReply{allowed: allowed, remaining: remaining, retryAfter: retry, resetAfter: reset, extra: extra}
	}
	for _, tt := range []struct {
		name     string
		v        []int64
		n        int
		want     []scriptReply
		recorded bool
		err      string
	}{
		{name: "admitted in short", v: []int64{250, 1}, n: 1,
			want: []scriptReply{full(true, 0, 0, 250*time.Microsecond, 0)}, recorded: true},
		{name: "admitted at once", v: []int64{0, 1}, n: 1,
			want: []scriptReply{full(true, 0, 0, 0, 0)}, recorded: true},
		{name: "denied in full", v: []int64{fullReply, 0, 0, 500, 900, 0, 0}, n: 1,
			want: []scriptReply{full(false, 0, 500*time.Microsecond, 900*time.Microsecond, 0)}},
		{name: "both, a window's end", v: []int64{600, fullReply, 1, 4, 0, 199, 1796608800000, 1}, n: 2,
			want: []scriptReply{full(true, 0, 0, 600*time.Microsecond, 0), full(true, 4, 0, 199*time.Microsecond, 1796608800000)}, recorded: true},
		{name: "peeked: admitted, not recorded", v: []int64{250, 0}, n: 1,
			want: []scriptReply{full(true, 0, 0, 250*time.Microsecond, 0)}},
		{name: "empty", v: nil, n: 1, err: "ends within check 1 of 1"},
		{name: "no flag", v: []int64{250}, n: 1, err: "has no recorded flag"},
		{name: "cut within a full reply", v: []int64{250, fullReply, 1, 4}, n: 2, err: "has no recorded flag"},
		{name: "cut before a check", v: []int64{250}, n: 2, err: "ends within check 2 of 2"},
		{name: "unknown marker", v: []int64{-2, 0, 0, 0, 0, 0, 1}, n: 1, err: "check 1 of 1: unexpected reply -2"},
		{name: "one more", v: []int64{250, 1, 1}, n: 1, err: "1 more"},
		{name: "the old five", v: []int64{1, 0, 0, 250, 0, 1}, n: 1, err: "4 more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []scriptReply
			recorded, err := readDecideReply(tt.v, tt.n, func(i int, r scriptReply) {
				if i != len(got) {
					t.Fatalf("check %d handed over after %d", i, len(got))
				}
				got = append(got, r)
			})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				if got != nil {
					t.Fatalf("%d checks handed over from a bad reply", len(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) || recorded != tt.recorded {
				t.Fatalf("got %+v recorded %v, want %+v recorded %v", got, recorded, tt.want, tt.recorded)
			}
		})
	}
}

// A merged call's reply is split into its calls' parts by their shapes;
// when the whole does not parse, every call gets the error, none a part.
func TestMergedReplySplit(t *testing.T) {
	g := limiter.Check{Rule: policy("rs-gcra", limiter.GCRA), Limit: limiter.Limit{Rate: 5, Period: time.Hour}}
	fw := limiter.Check{Rule: policy("rs-fw", limiter.FixedWindow), Limit: limiter.Limit{Rate: 5, Period: time.Hour}}
	for _, tt := range []struct {
		name  string
		reply []int64
		parts [][]int64
		err   string
	}{
		{name: "short, full, two checks",
			reply: []int64{250, 1, fullReply, 0, 0, 500, 900, 0, 0, 300, fullReply, 1, 4, 0, 199, 1796608800000, 1},
			parts: [][]int64{{250, 1}, {fullReply, 0, 0, 500, 900, 0, 0}, {300, fullReply, 1, 4, 0, 199, 1796608800000, 1}}},
		{name: "one short", reply: []int64{250, 1, 260, 1}, err: "ends within check 1 of 2"},
		{name: "one over", reply: []int64{250, 1, 260, 1, 270, 280, 1, 1}, err: "8 integers, 1 more than theirs"},
		{name: "a bad marker", reply: []int64{250, 1, -7, 1, 270, 1, 280, 1}, err: "unexpected reply -7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := []*redis.IntSliceCmd{decideCall(t, "a", g), decideCall(t, "b", g), decideCall(t, "c", g, fw)}
			cmds := []redis.Cmder{calls[0], calls[1], calls[2]}
			merged, split := mergeDecides(cmds)
			if len(merged) != 1 {
				t.Fatalf("merged into %d commands, want 1", len(merged))
			}
			merged[0].(*redis.IntSliceCmd).SetVal(tt.reply)
			split()
			for i, c := range calls {
				got, err := c.Result()
				if tt.err != "" {
					if err == nil || !strings.Contains(err.Error(), tt.err) || got != nil {
						t.Fatalf("call %d: %v, %v; want no reply and an error with %q", i, got, err, tt.err)
					}
					continue
				}
				if err != nil || !slices.Equal(got, tt.parts[i]) {
					t.Fatalf("call %d: %v, %v; want %v", i, got, err, tt.parts[i])
				}
			}
		})
	}
}
