package limiter

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// Reset gives a key its whole limit back, on buckets and in-flight slots,
// and touches no other key.
func TestLocalReset(t *testing.T) {
	lim := Limit{Rate: 5, Period: time.Minute, Burst: 5}
	for _, alg := range []Algorithm{TokenBucket, Concurrency} {
		t.Run(string(alg), func(t *testing.T) {
			l := NewLocal(0)
			g := BucketGroup{Policy: "p", Limit: lim, Algorithm: alg}
			var holds []*Reservation
			for _, key := range []string{"k", "neighbour"} {
				for range 3 {
					d, h := l.Reserve(t0, g, key, 1)
					if !d.Allowed {
						t.Fatalf("taking 3 of 5 of %s: denied: %+v", key, d)
					}
					if key == "k" {
						holds = append(holds, h)
					}
				}
			}
			remaining := func(key string) int64 { return l.Peek(t0, g, key).Remaining }
			if got := remaining("k"); got != 2 {
				t.Fatalf("before Reset: got %d left, want 2", got)
			}
			l.Reset(g, "k")
			if got := remaining("k"); got != 5 {
				t.Fatalf("after Reset: got %d left, want 5", got)
			}
			if got := remaining("neighbour"); got != 2 {
				t.Fatalf("another key after Reset: got %d left, want 2", got)
			}

			// What was held before the reset gives nothing back to the fresh
			// state: the key keeps exactly what it takes afterwards.
			if d, _ := l.Reserve(t0, g, "k", 1); !d.Allowed || d.Remaining != 4 {
				t.Fatalf("first request after Reset: got %+v, want admitted with 4 left", d)
			}
			for _, h := range holds {
				h.Release(t.Context())
			}
			if got := remaining("k"); got != 4 {
				t.Fatalf("after the old holds were released: got %d left, want 4", got)
			}
		})
	}
}

// Token buckets are kept per limit: a reset at one limit (a plan's) leaves
// the key's bucket at another.
func TestLocalResetIsPerLimit(t *testing.T) {
	l := NewLocal(0)
	free := BucketGroup{Policy: "p", Limit: Limit{Rate: 5, Period: time.Minute, Burst: 5}}
	pro := BucketGroup{Policy: "p", Limit: Limit{Rate: 50, Period: time.Minute, Burst: 50}}
	l.Reserve(t0, free, "k", 3)
	l.Reserve(t0, pro, "k", 3)
	l.Reset(free, "k")
	if got := l.Peek(t0, free, "k").Remaining; got != 5 {
		t.Fatalf("the reset limit: got %d left, want 5", got)
	}
	if got := l.Peek(t0, pro, "k").Remaining; got != 47 {
		t.Fatalf("the other limit: got %d left, want 47", got)
	}
}

// Reset of a key nobody asked for changes nothing and creates nothing.
func TestLocalResetUnknownKey(t *testing.T) {
	l := NewLocal(0)
	for _, alg := range []Algorithm{TokenBucket, Concurrency} {
		g := BucketGroup{Policy: "p", Limit: Limit{Rate: 1, Period: time.Second}, Algorithm: alg}
		l.Reset(g, "nobody")
		if n := l.Keys(g); n != 0 {
			t.Fatalf("%s: got %d keys, want 0", alg, n)
		}
	}
	if len(l.bucketStores()) != 0 {
		t.Fatalf("got %d bucket stores, want none created by Reset", len(l.bucketStores()))
	}
}

// resetBackend is a shared backend that records resets; it decides nothing.
type resetBackend struct {
	reset []Check
	err   error
}

func (b *resetBackend) Decide(_ context.Context, checks []Check, _ Fallback) ([]Decision, Settler) {
	return make([]Decision, len(checks)), nil
}

func (b *resetBackend) Reset(_ context.Context, c Check) error {
	b.reset = append(b.reset, c)
	return b.err
}

// peekOnlyBackend can peek but not reset.
type peekOnlyBackend struct{}

func (peekOnlyBackend) Decide(_ context.Context, checks []Check, _ Fallback) ([]Decision, Settler) {
	return make([]Decision, len(checks)), nil
}

func (peekOnlyBackend) Peek(_ context.Context, checks []Check) []Decision {
	ds := make([]Decision, len(checks))
	for i, c := range checks {
		ds[i] = Decision{Policy: c.Rule.Name, Limit: c.Limit, Allowed: true, Remaining: c.Limit.Quota()}
	}
	return ds
}

// Engine.Reset resets local checks in the local buckets and hands shared
// ones to the backend, and says when it cannot.
func TestEngineReset(t *testing.T) {
	ctx := context.Background()
	lim := Limit{Rate: 5, Period: time.Minute, Burst: 5}
	local := Check{Rule: &Rule{Name: "local", Algorithm: TokenBucket}, Limit: lim, Key: "k", Cost: 3}
	shared := Check{Rule: &Rule{Name: "shared", Algorithm: GCRA}, Limit: lim, Key: "k"}

	t.Run("local", func(t *testing.T) {
		e, _ := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
		if v, err := e.Decide(ctx, []Check{local}); err != nil || !v.Allowed {
			t.Fatalf("decide: %+v %v", v, err)
		}
		if d, _ := e.PeekOne(ctx, local); d.Remaining != 2 {
			t.Fatalf("before Reset: got %d left, want 2", d.Remaining)
		}
		if err := e.Reset(ctx, local); err != nil {
			t.Fatal(err)
		}
		if d, err := e.PeekOne(ctx, local); err != nil || d.Remaining != 5 {
			t.Fatalf("after Reset: got %+v, err %v; want 5 left", d, err)
		}
	})
	backendErr := errors.New("redis down")
	for _, c := range []struct {
		name    string
		backend Backend
		wantErr error
	}{
		{"no shared backend", nil, ErrNoSharedBackend},
		{"a backend that cannot reset", peekOnlyBackend{}, ErrNoReset},
		{"a backend that can", &resetBackend{}, nil},
		{"a backend that fails", &resetBackend{err: backendErr}, backendErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := NewEngine(func() time.Time { return t0 }, NewLocal(0), c.backend)
			err := e.Reset(ctx, shared)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("got error %v, want %v", err, c.wantErr)
			}
			if rb, ok := c.backend.(*resetBackend); ok && (len(rb.reset) != 1 || rb.reset[0].Key != "k" || rb.reset[0].Rule != shared.Rule) {
				t.Fatalf("the backend got %+v, want the one check", rb.reset)
			}
		})
	}
	t.Run("without policy", func(t *testing.T) {
		e, _ := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
		if err := e.Reset(ctx, Check{Key: "k"}); err == nil {
			t.Fatal("got nil error, want one")
		}
	})
}

// PeekOne reports one check, and says when a shared one could not be read.
func TestEnginePeekOne(t *testing.T) {
	ctx := context.Background()
	lim := Limit{Rate: 5, Period: time.Minute, Burst: 5}
	shared := Check{Rule: &Rule{Name: "shared", Algorithm: GCRA}, Limit: lim, Key: "k"}
	for _, c := range []struct {
		name    string
		backend Backend
		wantErr error
		want    int64
	}{
		{"no shared backend", nil, ErrNoSharedBackend, 0},
		{"a backend that cannot peek", &resetBackend{}, ErrNotReported, 0},
		{"a backend that can", peekOnlyBackend{}, nil, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := NewEngine(func() time.Time { return t0 }, NewLocal(0), c.backend)
			d, err := e.PeekOne(ctx, shared)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("got error %v, want %v", err, c.wantErr)
			}
			if d.Policy != "shared" || d.Remaining != c.want {
				t.Fatalf("got %+v, want policy shared with %d left", d, c.want)
			}
		})
	}
	e, _ := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
	if _, err := e.PeekOne(ctx, Check{Key: "k"}); err == nil {
		t.Fatal("without policy: got nil error, want one")
	}
}

// PeekInto tells what Peek does, in the caller's array when it is large
// enough (whatever it held before), in a new one when it is not.
func TestEnginePeekInto(t *testing.T) {
	ctx := context.Background()
	e, _ := NewEngine(func() time.Time { return t0 }, NewLocal(0), nil)
	lim := Limit{Rate: 5, Period: time.Minute, Burst: 5}
	checks := []Check{
		{Rule: &Rule{Name: "a", Algorithm: TokenBucket}, Limit: lim, Key: "k", Cost: 2},
		{Rule: &Rule{Name: "shared", Algorithm: GCRA}, Limit: lim, Key: "k"},
	}
	if _, err := e.Decide(ctx, checks[:1]); err != nil {
		t.Fatal(err)
	}
	want := e.Peek(ctx, checks)
	for _, size := range []int{1, 2, 3} {
		buf := make([]Decision, size)
		for i := range buf {
			buf[i] = Decision{Policy: "stale", Allowed: true, Remaining: 99}
		}
		got := e.PeekInto(ctx, checks, buf[:0])
		if !slices.Equal(got, want) {
			t.Fatalf("into %d: got %+v, want %+v", size, got, want)
		}
		if inPlace := &got[0] == &buf[0]; inPlace != (size >= len(checks)) {
			t.Errorf("into %d: in the caller's array %v, want %v", size, inPlace, size >= len(checks))
		}
	}
}
