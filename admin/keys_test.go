package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
	"github.com/ratelimit-gateway/gateway/policies"
)

// keyPath is /admin/keys for policy and key, and plan when not "".
func keyPath(policy, key, plan string) string {
	q := url.Values{"policy": {policy}, "key": {key}}
	if plan != "" {
		q.Set("plan", plan)
	}
	return "/admin/keys?" + q.Encode()
}

// keyStateOf reads GET /admin/keys, failing unless it is a 200.
func keyStateOf(t *testing.T, a answer) keyState {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("GET /admin/keys: got %d %s, want 200", a.status, a.body)
	}
	var st keyState
	a.decode(t, &st)
	return st
}

// takeThree reserves 3 units of c through e, holding them (in-flight slots
// stay taken).
func takeThree(t *testing.T, e *limiter.Engine, c limiter.Check) {
	t.Helper()
	for i := range 3 {
		v, _, err := e.Reserve(t.Context(), []limiter.Check{c})
		if err != nil || !v.Allowed {
			t.Fatalf("request %d: allowed %v, err %v; want admitted", i+1, v.Allowed, err)
		}
	}
}

// resetCase is one policy whose key is read, reset and read again.
type resetCase struct {
	policy, key, plan string
	backend           string
}

// checkReset takes 3 of the key's 5 through e, and checks over HTTP that
// the key has 2 left, that DELETE resets it, and that it then has 5. With
// rdb, it checks too that Redis held keys of the policy before the DELETE,
// and none after.
func checkReset(t *testing.T, srv *adminServer, e *limiter.Engine, snap *policies.Snapshot, c resetCase, rdb redis.UniversalClient) {
	t.Helper()
	pol := snap.Policies[c.policy]
	lim := pol.Limit
	if c.plan != "" {
		lim = pol.Plans[c.plan]
	}
	takeThree(t, e, limiter.Check{Rule: pol.Rule, Limit: lim, Key: c.key, Cost: 1})

	st := keyStateOf(t, srv.call(t, "GET", keyPath(c.policy, c.key, c.plan)))
	want := keyState{Policy: c.policy, Key: c.key, Plan: c.plan, Algorithm: algorithmOf(pol), Backend: c.backend,
		Limit: 5, Allowed: true, Remaining: 2}
	if st.Policy != want.Policy || st.Key != want.Key || st.Plan != want.Plan || st.Algorithm != want.Algorithm ||
		st.Backend != want.Backend || st.Limit != want.Limit || !st.Allowed || st.Remaining != want.Remaining {
		t.Fatalf("after taking 3 of 5: got %+v, want %+v", st, want)
	}
	if rdb != nil && len(keysOfPolicy(t, rdb, c.policy)) == 0 {
		t.Fatalf("after taking 3 of 5: redis holds no key of %s", c.policy)
	}

	a := srv.call(t, "DELETE", keyPath(c.policy, c.key, ""))
	var reset keyReset
	a.decode(t, &reset)
	if a.status != http.StatusOK || !reset.Reset || reset.Policy != c.policy || reset.Key != c.key || reset.Backend != c.backend {
		t.Fatalf("DELETE: got %d %s, want 200 with reset true", a.status, a.body)
	}
	if rdb != nil {
		if keys := keysOfPolicy(t, rdb, c.policy); len(keys) != 0 {
			t.Fatalf("after DELETE: redis still holds %q", keys)
		}
	}
	if st := keyStateOf(t, srv.call(t, "GET", keyPath(c.policy, c.key, c.plan))); !st.Allowed || st.Remaining != 5 {
		t.Fatalf("after DELETE: got %+v, want allowed with 5 left", st)
	}
}

// adminServer is an admin server and the token it needs.
type adminServer struct {
	srv   *httptest.Server
	token string
}

func newAdminServer(t *testing.T, cfg Config) *adminServer {
	t.Helper()
	return &adminServer{srv: serve(t, cfg), token: cfg.Token}
}

func (s *adminServer) call(t *testing.T, method, path string) answer {
	t.Helper()
	return call(t, s.srv, method, path, s.token)
}

// On local buckets and in-flight counts: 3 of 5 taken leaves 2, DELETE
// gives all 5 back. A reset clears the key under every plan's limit.
func TestKeysLocal(t *testing.T) {
	snap := parse(t, strings.Replace(baseYAML, "rate: 5, per: 1m}", "rate: 5, per: 1m, burst: 5}", 1))
	e := localEngine(t)
	srv := newAdminServer(t, Config{Token: testToken, Snapshots: policies.NewCurrent(snap), Keys: EngineKeys{Engine: e}})
	for _, c := range []resetCase{
		{policy: "per-ip", key: "203.0.113.7/32", backend: "local"},
		{policy: "per-ip", key: "2001:db8:1:2::/64", backend: "local"},
		{policy: "tenant-rpm", key: "acme", plan: "free", backend: "local"},
		{policy: "tenant-inflight", key: "globex", backend: "local"},
		{policy: "by-key", key: sha256Hex("sk-test-free"), backend: "local"},
		{policy: "per-ip", key: "\x00anon", backend: "local"},
	} {
		t.Run(c.policy+"/"+c.key, func(t *testing.T) {
			checkReset(t, srv, e, snap, c, nil)
		})
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Bad questions get 400 saying what is wrong; no Keys is 501.
func TestKeysBadRequests(t *testing.T) {
	snap := parse(t, baseYAML)
	srv := newAdminServer(t, Config{Token: testToken, Snapshots: policies.NewCurrent(snap), Keys: EngineKeys{Engine: localEngine(t)}})
	for _, c := range []struct {
		name, method, query, want string
	}{
		{"no policy", "GET", "key=acme", "the policy parameter is required"},
		{"unknown policy", "GET", "policy=nope&key=acme", `unknown policy "nope" (known: by-key, per-ip, tenant-inflight, tenant-rpm)`},
		{"no key", "GET", "policy=per-ip", "the key parameter is required"},
		{"empty key", "GET", "policy=per-ip&key=", "the key parameter is required"},
		{"an address, not a network", "GET", "policy=per-ip&key=203.0.113.7", "did you mean 203.0.113.7/32?"},
		{"a network with host bits", "GET", "policy=per-ip&key=2001:db8:1:2::5/64", "did you mean 2001:db8:1:2::/64?"},
		{"an api key itself", "GET", "policy=by-key&key=sk-test-free", "the SHA-256 of the API key"},
		{"unknown tenant", "GET", "policy=tenant-rpm&key=nobody", `no API key in tenants.keys belongs to tenant "nobody"`},
		{"unknown plan", "GET", "policy=tenant-rpm&key=acme&plan=gold", `has no plan "gold" (its plans: free, pro)`},
		{"plan of a policy without plans", "GET", "policy=per-ip&key=203.0.113.7/32&plan=free", "has no plans"},
		{"unknown parameter", "GET", "policy=per-ip&key=203.0.113.7/32&polcy=x", `unknown parameter "polcy"`},
		{"parameter twice", "GET", "policy=per-ip&policy=tenant-rpm&key=acme", `parameter "policy" is given 2 times`},
		{"plan on a reset", "DELETE", "policy=tenant-rpm&key=acme&plan=free", `unknown parameter "plan"`},
		{"a key too long", "GET", "policy=tenant-rpm&key=" + strings.Repeat("k", maxKeyBytes+1), "the gateway makes no key longer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := srv.call(t, c.method, "/admin/keys?"+c.query)
			if a.status != http.StatusBadRequest {
				t.Fatalf("got %d %s, want 400", a.status, a.body)
			}
			if e := a.errorOf(t); !strings.Contains(e.Message, c.want) {
				t.Fatalf("message: got %q, want it to say %q", e.Message, c.want)
			}
			if strings.Contains(c.query, "sk-test-free") && strings.Contains(string(a.body), "sk-test-free") {
				t.Fatalf("the answer repeats the API key: %s", a.body)
			}
		})
	}

	none := newAdminServer(t, Config{Token: testToken, Snapshots: policies.NewCurrent(snap)})
	for _, m := range []string{"GET", "DELETE"} {
		if a := none.call(t, m, keyPath("per-ip", "203.0.113.7/32", "")); a.status != http.StatusNotImplemented {
			t.Fatalf("%s without Keys: got %d, want 501", m, a.status)
		}
	}
}

// redisYAML has one policy per shared algorithm, 5 per hour (5 slots),
// on the Redis at %s.
const redisYAML = `
redis: {addrs: ["%s"]}
routes: [{name: r, upstream: builtin:echo, policies: [gcra, sliding, fixed, leases, fallback]}]
tenants:
  keys:
    sk-test-free: {tenant: acme, plan: free}
policies:
  gcra: {key: tenant, algorithm: gcra, rate: 5, per: 1h}
  sliding: {key: tenant, algorithm: sliding_window, rate: 5, per: 1h}
  fixed: {key: tenant, algorithm: fixed_window, rate: 5, per: 1h}
  leases: {key: tenant, algorithm: shared_concurrency, limit: 5, lease: 1h}
  fallback: {key: tenant, algorithm: gcra, per: 1h, plans: {free: 5, pro: 50}, on_redis_error: local, local_share: 0.5}
`

// redisEngine connects an engine to the real Redis at addr, as cmd does.
func redisEngine(t *testing.T, addr string) (*limiter.Engine, redis.UniversalClient) {
	t.Helper()
	client, err := redisclient.New(redisclient.Options{Addrs: []string{addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	local := limiter.NewLocal(0)
	shared, err := redislimit.New(client, redislimit.Config{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Close() })
	e, err := limiter.NewEngine(time.Now, local, shared)
	if err != nil {
		t.Fatal(err)
	}
	return e, client
}

// keysOfPolicy lists the Redis keys of policy (they all carry the hash tag
// "{<policy>:").
func keysOfPolicy(t *testing.T, c redis.UniversalClient, policy string) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), "*{"+policy+":*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return keys
}

// awayFromHourEdge waits, when Redis's clock is within a few seconds of a
// full hour, for the next hour: the fixed window counts per aligned hour.
func awayFromHourEdge(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if left := now.Truncate(time.Hour).Add(time.Hour).Sub(now); left < 5*time.Second {
		<-time.After(left + 100*time.Millisecond) // Redis's clock has no event to wait on
	}
}

// On Redis, for every shared algorithm: 3 of 5 taken leaves 2, DELETE
// deletes every Redis key of the key and gives all 5 back. With Redis gone,
// reading and resetting answer 503.
func TestKeysRedis(t *testing.T) {
	s := redistest.Start(t)
	e, client := redisEngine(t, s.Addr())
	awayFromHourEdge(t, client)
	snap := parse(t, fmt.Sprintf(redisYAML, s.Addr()))
	srv := newAdminServer(t, Config{Token: testToken, Snapshots: policies.NewCurrent(snap), Keys: EngineKeys{Engine: e}})
	for _, c := range []resetCase{
		{policy: "gcra", key: "acme", backend: "redis"},
		{policy: "sliding", key: "acme", backend: "redis"},
		{policy: "fixed", key: "acme", backend: "redis"},
		{policy: "leases", key: "acme", backend: "redis"},
		{policy: "fallback", key: "acme", plan: "free", backend: "redis"},
	} {
		t.Run(c.policy, func(t *testing.T) {
			if n := len(keysOfPolicy(t, client, c.policy)); n != 0 {
				t.Fatalf("before: redis holds %d keys of %s, want none", n, c.policy)
			}
			checkReset(t, srv, e, snap, c, client)
		})
	}

	s.Kill()
	for _, m := range []string{"GET", "DELETE"} {
		a := srv.call(t, m, keyPath("gcra", "acme", ""))
		if a.status != http.StatusServiceUnavailable {
			t.Fatalf("%s with redis down: got %d %s, want 503", m, a.status, a.body)
		}
		a.errorOf(t)
	}
}
