package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
	"github.com/ratelimit-gateway/gateway/redislock"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Every hold is ended by now: a goroutine left is a lock watchdog
		// nobody stopped.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var terms = idempotency.Terms{LockTTL: time.Second, ReplayTTL: time.Minute}

// stores are the stores every contract test runs on: in-process, and on a
// real Redis, standalone and a 3-master Cluster.
func stores(t *testing.T) map[string]func(t *testing.T) idempotency.Store {
	return map[string]func(t *testing.T) idempotency.Store{
		"local": func(t *testing.T) idempotency.Store { return newLocal(t, time.Now, idempotency.LocalConfig{}) },
		"redis": func(t *testing.T) idempotency.Store {
			s := redistest.Start(t)
			return newRedisStore(t, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true}))
		},
		"cluster": func(t *testing.T) idempotency.Store {
			c := redistest.StartCluster(t)
			return newRedisStore(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true}))
		},
	}
}

func newLocal(t *testing.T, now func() time.Time, cfg idempotency.LocalConfig) *idempotency.Local {
	t.Helper()
	s, err := idempotency.NewLocal(now, cfg)
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	return s
}

func newRedisStore(t *testing.T, client redis.UniversalClient) idempotency.Store {
	t.Helper()
	t.Cleanup(func() { _ = client.Close() })
	s, err := idempotency.NewRedis(client, idempotency.RedisConfig{Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustBegin(t *testing.T, s idempotency.Store, key string) idempotency.Claim {
	t.Helper()
	c, err := s.Begin(context.Background(), key, terms)
	if err != nil {
		t.Fatalf("Begin(%q): %v", key, err)
	}
	return c
}

// The life of a key on every store: the first claim holds it, a second is
// busy, the record left by Complete is what later claims get, an Abort lets
// the next claim hold the key with a larger fencing token, and keys are
// independent.
func TestStoreContract(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			ctx := context.Background()
			for i := range 20 { // on a Cluster, keys spread over the masters
				key := fmt.Sprintf("tenant:a\x00POST\x00/pay\x00order-%d", i)
				first := mustBegin(t, s, key)
				if first.Owner == nil {
					t.Fatalf("%s: first claim got %+v, want a hold", key, first)
				}
				if c := mustBegin(t, s, key); !c.Busy() {
					t.Fatalf("%s: second claim got %+v, want busy", key, c)
				}
				if err := first.Owner.Abort(ctx); err != nil {
					t.Fatalf("%s: Abort: %v", key, err)
				}
				second := mustBegin(t, s, key)
				if second.Owner == nil {
					t.Fatalf("%s: claim after Abort got %+v, want a hold", key, second)
				}
				if second.Owner.Fence() <= first.Owner.Fence() {
					t.Fatalf("%s: fence after Abort %d, want > %d", key, second.Owner.Fence(), first.Owner.Fence())
				}
				rec := &idempotency.Record{Fingerprint: [32]byte{byte(i)}, Status: 201,
					Header: http.Header{"Location": {fmt.Sprintf("/pay/%d", i)}}, Body: []byte(`{"id":1}`)}
				if err := second.Owner.Complete(ctx, rec); err != nil {
					t.Fatalf("%s: Complete: %v", key, err)
				}
				for range 2 {
					got := mustBegin(t, s, key)
					if got.Record == nil || got.Owner != nil {
						t.Fatalf("%s: claim after Complete got %+v, want the record", key, got)
					}
					if got.Record.Status != 201 || string(got.Record.Body) != `{"id":1}` ||
						got.Record.Header.Get("Location") != fmt.Sprintf("/pay/%d", i) || got.Record.Fingerprint != rec.Fingerprint {
						t.Fatalf("%s: record got %+v, want %+v", key, got.Record, rec)
					}
				}
			}
		})
	}
}

// 64 claims of one key at once: exactly one holds it; once it completes,
// every claim gets the record and none holds the key again.
func TestStoreConcurrentClaims(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			const n = 64
			var holds, busy atomic.Int64
			var wg sync.WaitGroup
			var mu sync.Mutex
			var held idempotency.Owner
			start := make(chan struct{})
			for range n {
				wg.Go(func() {
					<-start
					c, err := s.Begin(context.Background(), "k", terms)
					switch {
					case err != nil:
						t.Errorf("Begin: %v", err)
					case c.Owner != nil:
						holds.Add(1)
						mu.Lock()
						held = c.Owner
						mu.Unlock()
					case c.Busy():
						busy.Add(1)
					default:
						t.Errorf("Begin before any Complete got a record %+v", c.Record)
					}
				})
			}
			close(start)
			wg.Wait()
			if holds.Load() != 1 || busy.Load() != n-1 {
				t.Fatalf("holds %d, busy %d; want 1 and %d", holds.Load(), busy.Load(), n-1)
			}
			if err := held.Complete(context.Background(), &idempotency.Record{Status: 200, Body: []byte("done")}); err != nil {
				t.Fatal(err)
			}
			var records atomic.Int64
			for range n {
				wg.Go(func() {
					c, err := s.Begin(context.Background(), "k", terms)
					if err == nil && c.Record != nil && string(c.Record.Body) == "done" {
						records.Add(1)
					} else {
						t.Errorf("Begin after Complete: got %+v, %v; want the record", c, err)
					}
				})
			}
			wg.Wait()
			if records.Load() != n {
				t.Fatalf("records %d, want %d", records.Load(), n)
			}
		})
	}
}

// Wait returns once the holder ends (at once when nobody holds the key),
// and with the context's error when that ends first.
func TestStoreWait(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			ctx := context.Background()
			if err := s.Wait(ctx, "free"); err != nil {
				t.Fatalf("Wait on a free key: %v", err)
			}
			hold := mustBegin(t, s, "k").Owner
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.Wait(cctx, "k"); !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait with an ended context: got %v, want context.Canceled", err)
			}
			done := make(chan idempotency.Claim)
			go func() {
				for {
					if err := s.Wait(ctx, "k"); err != nil {
						t.Error(err)
						close(done)
						return
					}
					if c, err := s.Begin(ctx, "k", terms); err != nil || !c.Busy() {
						done <- c
						return
					}
				}
			}()
			if err := hold.Complete(ctx, &idempotency.Record{Status: 204}); err != nil {
				t.Fatal(err)
			}
			select {
			case c := <-done:
				if c.Record == nil || c.Record.Status != 204 {
					t.Fatalf("waiter got %+v, want the record", c)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("waiter did not see the holder finish")
			}
		})
	}
}

// A Redis hold whose lock expired (forced here by deleting it, as a
// failover or a pause past the TTL would) stores nothing: the next holder,
// with a larger fencing token, is the one whose record is kept.
func TestRedisStaleHolderStoresNothing(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	s := newRedisStore(t, client)
	ctx := context.Background()
	stale := mustBegin(t, s, "k").Owner
	lock, _ := redislock.Keys("idem:k")
	if n, err := client.Del(ctx, lock).Result(); err != nil || n != 1 {
		t.Fatalf("deleting the lock %s: %d, %v", lock, n, err)
	}
	next := mustBegin(t, s, "k").Owner
	if next == nil || next.Fence() <= stale.Fence() {
		t.Fatalf("claim after the expiry: got %v, want a hold with a fence above %d", next, stale.Fence())
	}
	if err := stale.Complete(ctx, &idempotency.Record{Status: 200, Body: []byte("stale")}); !errors.Is(err, idempotency.ErrLost) {
		t.Fatalf("stale Complete: got %v, want ErrLost", err)
	}
	if err := next.Complete(ctx, &idempotency.Record{Status: 200, Body: []byte("next")}); err != nil {
		t.Fatal(err)
	}
	if c := mustBegin(t, s, "k"); c.Record == nil || string(c.Record.Body) != "next" {
		t.Fatalf("record got %+v, want the next holder's", c.Record)
	}
}

// A Redis hold's lock is renewed while its holder works: held for 3 TTLs,
// it is still the holder's, and a second claim stays busy throughout. The
// TTL is Redis's, on its own clock, and the renewals must reach it within
// it: it is long enough for a loaded machine's stalls (60ms was not, at a
// load of 20 on 2 cores), and 3 TTLs still span several renewals.
func TestRedisHoldRenewed(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true}))
	ctx := context.Background()
	short := idempotency.Terms{LockTTL: 500 * time.Millisecond, ReplayTTL: time.Minute}
	c, err := s.Begin(ctx, "k", short)
	if err != nil || c.Owner == nil {
		t.Fatalf("Begin: %+v, %v", c, err)
	}
	// The deadline is the assertion's window, not an ordering device: the
	// lock must outlive it.
	for end := time.Now().Add(3 * short.LockTTL); time.Now().Before(end); {
		if c2, err := s.Begin(ctx, "k", short); err != nil || !c2.Busy() {
			t.Fatalf("second claim while held: %+v, %v; want busy", c2, err)
		}
		if err := c.Owner.Lost(); err != nil {
			t.Fatalf("hold lost while renewed: %v", err)
		}
	}
	if err := c.Owner.Complete(ctx, &idempotency.Record{Status: 200}); err != nil {
		t.Fatalf("Complete after 3 TTLs: %v", err)
	}
}

// A Local store at its cap drops expired records first, then the records
// closest to expiry; keys being held are never dropped, and when every key
// is held a new one is refused with ErrFull.
func TestLocalBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	s := newLocal(t, clock, idempotency.LocalConfig{MaxKeys: 32})
	ctx := context.Background()
	for i := range 32 {
		// Keys 0..15 are kept for a minute, 16..31 for an hour.
		tt := idempotency.Terms{LockTTL: time.Second, ReplayTTL: time.Minute}
		if i >= 16 {
			tt.ReplayTTL = time.Hour
		}
		c, err := s.Begin(ctx, fmt.Sprint(i), tt)
		if err != nil || c.Owner == nil {
			t.Fatalf("Begin(%d): %+v, %v", i, c, err)
		}
		if err := c.Owner.Complete(ctx, &idempotency.Record{Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 32 {
		t.Fatalf("Len %d, want 32", s.Len())
	}
	// Full of live records: the two closest to expiry (32/16) make room.
	newHold := mustBegin(t, s, "new").Owner
	if newHold == nil {
		t.Fatal("claim at the cap: no hold")
	}
	kept := 0
	for i := range 32 {
		c := mustBegin(t, s, fmt.Sprint(i))
		switch {
		case c.Record != nil:
			kept++
		case i >= 16:
			t.Fatalf("record %d (an hour left) dropped before those with a minute left", i)
		default:
			_ = c.Owner.Abort(ctx) // a dropped one, claimed again by this probe
		}
	}
	if kept != 30 {
		t.Fatalf("records kept at the cap: %d, want 30", kept)
	}
	now = now.Add(2 * time.Hour) // every record expired; "new" is still held
	held := []idempotency.Owner{newHold}
	for i := range 31 {
		c := mustBegin(t, s, fmt.Sprint("h", i))
		if c.Owner == nil {
			t.Fatalf("claim %d after expiry: %+v, want a hold", i, c)
		}
		held = append(held, c.Owner)
	}
	if _, err := s.Begin(ctx, "one-too-many", terms); !errors.Is(err, idempotency.ErrFull) {
		t.Fatalf("claim with every key held: got %v, want ErrFull", err)
	}
	for _, h := range held {
		if err := h.Abort(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("Len %d after every hold was aborted, want 0", s.Len())
	}
}

// recordOf is a finished request's record with a body of n bytes.
func recordOf(i, n int) *idempotency.Record {
	return &idempotency.Record{Fingerprint: [32]byte{byte(i), byte(i >> 8)}, Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: make([]byte, n)}
}

// A Local store stays under its byte bound by dropping the responses of the
// records closest to expiry; each leaves a done marker (fingerprint and
// status) for the rest of its replay TTL, so no duplicate is ever claimed
// as new. A response larger than the bound is kept as a marker at once.
func TestLocalBoundedByBytes(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	const maxBytes = 1 << 20
	s := newLocal(t, clock, idempotency.LocalConfig{MaxBytes: maxBytes})
	ctx := context.Background()
	const keys, body = 40, 100 << 10 // 4 MB of responses into 1 MiB
	for i := range keys {
		// Later keys are kept longer: the earliest are closest to expiry.
		tt := idempotency.Terms{LockTTL: time.Second, ReplayTTL: time.Hour + time.Duration(i)*time.Minute}
		c, err := s.Begin(ctx, fmt.Sprint("k", i), tt)
		if err != nil || c.Owner == nil {
			t.Fatalf("Begin(k%d): %+v, %v", i, c, err)
		}
		if err := c.Owner.Complete(ctx, recordOf(i, body)); err != nil {
			t.Fatalf("Complete(k%d): %v", i, err)
		}
		if st := s.Stats(); st.Bytes > maxBytes {
			t.Fatalf("after key %d: %d bytes counted, want at most %d", i, st.Bytes, maxBytes)
		}
	}
	markers, full := 0, 0
	for i := range keys {
		c := mustBegin(t, s, fmt.Sprint("k", i))
		if c.Record == nil {
			t.Fatalf("k%d: claim got %+v, want its record or done marker (a duplicate must not run again)", i, c)
		}
		want := recordOf(i, 0)
		if c.Record.Fingerprint != want.Fingerprint || c.Record.Status != 201 {
			t.Fatalf("k%d: record fingerprint/status got %x/%d, want %x/201", i, c.Record.Fingerprint[:2], c.Record.Status, want.Fingerprint[:2])
		}
		switch {
		case c.Record.Partial && c.Record.Body == nil:
			markers++
			if full > 0 {
				t.Fatalf("k%d: a marker after %d full records, want the records closest to expiry dropped first", i, full)
			}
		case len(c.Record.Body) == body:
			full++
		default:
			t.Fatalf("k%d: record with %d body bytes, partial %v; want %d bytes or a marker", i, len(c.Record.Body), c.Record.Partial, body)
		}
	}
	st := s.Stats()
	if full == 0 || full > maxBytes/body || st.Markers != markers || st.BodiesDropped != int64(markers) {
		t.Fatalf("got %d full records, %d markers, stats %+v; want 1..%d full and every other key a counted marker", full, markers, st, maxBytes/body)
	}

	// Larger than the whole bound: kept as a marker at once.
	c := mustBegin(t, s, "huge")
	if err := c.Owner.Complete(ctx, recordOf(7, 2*maxBytes)); err != nil {
		t.Fatalf("Complete(huge): %v", err)
	}
	if got := mustBegin(t, s, "huge"); got.Record == nil || !got.Record.Partial || got.Record.Status != 201 {
		t.Fatalf("huge: claim got %+v, want a done marker with status 201", got)
	}
	if st := s.Stats(); st.Bytes > maxBytes {
		t.Fatalf("after a 2 MiB record: %d bytes counted, want at most %d", st.Bytes, maxBytes)
	}

	// Once the records expire their keys are free again, markers with
	// them, and every byte is given back.
	now = now.Add(3 * time.Hour)
	for i := range keys + 1 {
		key := fmt.Sprint("k", i)
		if i == keys {
			key = "huge"
		}
		c := mustBegin(t, s, key)
		if c.Owner == nil {
			t.Fatalf("%s: claim after expiry got %+v, want a hold", key, c)
		}
		_ = c.Owner.Abort(ctx)
	}
	if st := s.Stats(); st.Keys != 0 || st.Bytes != 0 || st.Markers != 0 {
		t.Fatalf("after every record expired: stats %+v, want an empty store", st)
	}
}

// When holds and done markers alone fill the bytes, a new key is refused
// (ErrFull, counted) rather than a marker dropped before its TTL.
func TestLocalFullOfMarkers(t *testing.T) {
	s := newLocal(t, time.Now, idempotency.LocalConfig{MaxBytes: idempotency.MinMaxBytes})
	ctx := context.Background()
	n := 0
	for ; n < 10_000; n++ {
		c, err := s.Begin(ctx, fmt.Sprint("marker-", n), terms)
		if errors.Is(err, idempotency.ErrFull) {
			break
		}
		if err != nil || c.Owner == nil {
			t.Fatalf("Begin(%d): %+v, %v", n, c, err)
		}
		if err := c.Owner.Complete(ctx, &idempotency.Record{Status: 200, Partial: true}); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 || n == 10_000 {
		t.Fatalf("markers stored before ErrFull: %d, want some, then ErrFull", n)
	}
	for i := range n {
		if c := mustBegin(t, s, fmt.Sprint("marker-", i)); c.Record == nil {
			t.Fatalf("marker %d of %d: claim got %+v, want the marker kept", i, n, c)
		}
	}
	if st := s.Stats(); st.Full != 1 || st.Markers != n || st.Bytes > idempotency.MinMaxBytes {
		t.Fatalf("stats %+v; want 1 refusal, %d markers, at most %d bytes", st, n, idempotency.MinMaxBytes)
	}
}

func TestNewLocalRejects(t *testing.T) {
	tests := []struct {
		name string
		now  func() time.Time
		cfg  idempotency.LocalConfig
		want string
	}{
		{"nil clock", nil, idempotency.LocalConfig{}, "nil clock"},
		{"negative keys", time.Now, idempotency.LocalConfig{MaxKeys: -1}, "max keys -1 is negative"},
		{"negative bytes", time.Now, idempotency.LocalConfig{MaxBytes: -1}, "max bytes -1 is below 65536"},
		{"bytes below the minimum", time.Now, idempotency.LocalConfig{MaxBytes: 1000}, "max bytes 1000 is below 65536"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := idempotency.NewLocal(tc.now, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewLocal: got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A record larger than RedisConfig.MaxRecordBytes is stored as a done
// marker: duplicates learn the request was done (fingerprint, status), and
// Redis holds no more than the bound for it.
func TestRedisRecordBounded(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	const bound = 64 << 10
	s, err := idempotency.NewRedis(client, idempotency.RedisConfig{MaxRecordBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		body    int
		partial bool
	}{
		{"under the bound", 1 << 10, false},
		{"over the bound", 100 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustBegin(t, s, tc.name)
			if err := c.Owner.Complete(ctx, recordOf(3, tc.body)); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			got := mustBegin(t, s, tc.name)
			if got.Record == nil || got.Record.Partial != tc.partial || got.Record.Status != 201 || got.Record.Fingerprint != recordOf(3, 0).Fingerprint {
				t.Fatalf("claim got %+v, want a record with status 201, partial %v", got, tc.partial)
			}
			if !tc.partial && len(got.Record.Body) != tc.body {
				t.Fatalf("body: got %d bytes, want %d", len(got.Record.Body), tc.body)
			}
			keys, err := client.Keys(ctx, "*:record").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				n, err := client.StrLen(ctx, k).Result()
				if err != nil || n > bound {
					t.Fatalf("STRLEN %s: %d, %v; want at most %d", k, n, err, bound)
				}
			}
		})
	}
	if _, err := idempotency.NewRedis(client, idempotency.RedisConfig{MaxRecordBytes: -1}); err == nil {
		t.Fatal("NewRedis with MaxRecordBytes -1: got nil error, want one")
	}
}

// What Redis holds per idempotency key, as MEMORY USAGE reports it: the
// lock while a request holds the key, the fencing counter, and the record.
// The figures are docs/memory.md's.
func TestRedisMemoryPerKey(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := idempotency.NewRedis(client, idempotency.RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	usage := func(pattern string) int64 {
		keys, err := client.Keys(ctx, pattern).Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("KEYS %s: %q, %v; want one key", pattern, keys, err)
		}
		n, err := client.MemoryUsage(ctx, keys[0]).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", keys[0], err)
		}
		return n
	}
	for _, body := range []int{0, 1 << 10, 1 << 20} {
		if err := client.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		c := mustBegin(t, s, "tenant:a\x00POST\x00/pay\x00order-1")
		lock := usage("lock:{*}")
		if err := c.Owner.Complete(ctx, recordOf(1, body)); err != nil {
			t.Fatal(err)
		}
		fence, rec := usage("*:fence"), usage("*:record")
		// The record is the body in base64 (4/3) and a few hundred bytes,
		// in an allocation the allocator rounds up (by up to a quarter).
		if limit := int64(body)*5/3 + 1024; rec > limit {
			t.Fatalf("record of a %d-byte body: %d bytes, want at most %d", body, rec, limit)
		}
		t.Logf("body %d bytes: lock %d, fencing counter %d, record %d bytes", body, lock, fence, rec)
	}
}
