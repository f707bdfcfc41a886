package limiter

import (
	"fmt"
	"testing"
	"time"
)

func TestLocalStats(t *testing.T) {
	hourly := Limit{Rate: 10, Period: time.Hour} // a bucket is idle after an hour
	fill := func(l *Local, g BucketGroup, keys int, now time.Time) {
		t.Helper()
		for i := range keys {
			if d, _ := l.Reserve(now, g, fmt.Sprintf("%s-%d", g.Policy, i), 1); !d.Allowed {
				t.Fatalf("%s key %d: got denied, want admitted", g.Policy, i)
			}
		}
	}

	t.Run("buckets across policies", func(t *testing.T) {
		l := NewLocal(0)
		fill(l, BucketGroup{Policy: "a", Limit: hourly}, 10, at(0))
		fill(l, BucketGroup{Policy: "b", Limit: hourly}, 5, at(0))
		fill(l, BucketGroup{Policy: "b", Limit: hourly, Fallback: true}, 2, at(0))
		if got, want := l.Stats(), (LocalStats{Buckets: 17}); got != want {
			t.Fatalf("got %+v, want %+v", got, want)
		}
		// A reload dropping a policy drops its buckets, not the counters.
		l.Retain(func(g BucketGroup) bool { return g.Policy != "a" })
		if got, want := l.Stats(), (LocalStats{Buckets: 7}); got != want {
			t.Fatalf("after Retain: got %+v, want %+v", got, want)
		}
	})

	t.Run("cap evicts", func(t *testing.T) {
		const capKeys, keys = 64, 500 // one bucket per shard
		l := NewLocal(capKeys)
		fill(l, BucketGroup{Policy: "p", Limit: hourly}, keys, at(0))
		st := l.Stats()
		if st.Buckets > capKeys || st.Evictions == 0 || st.Buckets+int(st.Evictions) != keys || st.Expired != 0 {
			t.Fatalf("got %+v, want at most %d buckets, the other of %d keys evicted, none expired", st, capKeys, keys)
		}
	})

	t.Run("idle buckets expire, not evicted", func(t *testing.T) {
		l := NewLocal(0)
		g := BucketGroup{Policy: "p", Limit: hourly}
		fill(l, g, 10, at(0))
		// Two hours later every old bucket is idle; new keys sweep the
		// shards they land in (with 2,000 keys, all 64 of them).
		for i := range 2000 {
			l.Reserve(at(2*time.Hour), g, fmt.Sprintf("late-%d", i), 1)
		}
		st := l.Stats()
		if st.Expired != 10 || st.Evictions != 0 || st.Buckets != 2000 {
			t.Fatalf("got %+v, want 10 expired, no evictions, 2000 buckets", st)
		}
	})

	t.Run("slots", func(t *testing.T) {
		l := NewLocal(64)
		g := BucketGroup{Policy: "streams", Limit: Limit{Rate: 2, Period: time.Second}, Algorithm: Concurrency}
		var holds []*Reservation
		for i := range 100 {
			d, h := l.Reserve(at(time.Duration(i)), g, fmt.Sprintf("k%d", i), 1)
			if !d.Allowed {
				t.Fatalf("key %d: got denied, want a slot", i)
			}
			holds = append(holds, h)
		}
		st := l.Stats()
		if st.SlotKeys > 64 || st.SlotEvictions == 0 || st.SlotKeys+int(st.SlotEvictions) != 100 || st.Buckets != 0 {
			t.Fatalf("got %+v, want at most 64 keys in flight, the other of 100 evicted", st)
		}
		for _, h := range holds {
			h.Release(t.Context())
		}
		if st := l.Stats(); st.SlotKeys != 0 {
			t.Fatalf("after release: got %d keys in flight, want 0", st.SlotKeys)
		}
	})
}
