package redislimit

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

func TestRedisBaseKeyIsBoundedAndTagged(t *testing.T) {
	hostile := "{evil}\r\nSET x y\r\n" + strings.Repeat("k", 10<<10)
	tests := []struct {
		name, policy, key string
		wantPolicyPart    string
	}{
		{"plain", "tenant-rpm", "acme", "tenant-rpm"},
		{"hostile key", "per-ip", hostile, "per-ip"},
		{"empty key", "per-ip", "", "per-ip"},
		{"hostile policy name is hashed", "a{b}\r\n", "k", ""},
		{"overlong policy name is hashed", strings.Repeat("p", 65), "k", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := redisBaseKey(tt.policy, digestKey(tt.key))
			if len(k) > 4+maxPolicyNameInKey+1+32+1 {
				t.Fatalf("got key of %d bytes, want at most %d", len(k), 4+maxPolicyNameInKey+1+32+1)
			}
			if strings.ContainsAny(k, "\r\n ") || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Fatalf("got key %q, want exactly one {…} tag and no CR, LF or space", k)
			}
			if !strings.HasPrefix(k, "rl:{") || !strings.HasSuffix(k, "}") {
				t.Fatalf("got key %q, want rl:{…}", k)
			}
			if tt.wantPolicyPart != "" && !strings.HasPrefix(k, "rl:{"+tt.wantPolicyPart+":") {
				t.Fatalf("got key %q, want the policy name %q in it", k, tt.wantPolicyPart)
			}
			// Every key of one (policy, key) shares the hash tag, so a
			// script touches one Cluster slot.
			for _, full := range []string{gcraKeyPrefix + k, k + slidingLogSuffix, k + slidingSumSuffix, k + fixedSuffix} {
				if hashTag(full) != hashTag(k) {
					t.Fatalf("key %q: got tag %q, want %q", full, hashTag(full), hashTag(k))
				}
			}
		})
	}
	if redisBaseKey("p", digestKey("a")) == redisBaseKey("p", digestKey("b")) {
		t.Fatal("different keys: got the same Redis key, want different ones")
	}
	if redisBaseKey("p", digestKey("a")) == redisBaseKey("q", digestKey("a")) {
		t.Fatal("different policies: got the same Redis key, want different ones")
	}
}

// hashTag is what Redis Cluster hashes: the part between the first "{" and
// the next "}".
func hashTag(k string) string {
	i := strings.IndexByte(k, '{')
	if i < 0 {
		return k
	}
	j := strings.IndexByte(k[i+1:], '}')
	if j <= 0 {
		return k
	}
	return k[i+1 : i+1+j]
}

func TestHostileKeyNeverReachesRedis(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	hostile := "{tag}\r\nFLUSHALL\r\n" + strings.Repeat("x", 10<<10)
	lim := limiter.Limit{Rate: 5, Period: time.Minute}
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		if d := decideOne(t, r, limiter.Check{Rule: policy("p-"+string(alg), alg), Limit: lim, Key: hostile}); !d.Allowed {
			t.Fatalf("%s: got denied (reason %d), want admitted", alg, d.Reason)
		}
	}
	keys, err := c.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	if len(keys) != 4 { // gcra 1, sliding 2, fixed 1
		t.Fatalf("got keys %q, want 4", keys)
	}
	for _, k := range keys {
		if len(k) > 100 || strings.ContainsAny(k, "\r\n") || strings.Contains(k, "xx") || strings.Contains(k, "tag") {
			t.Fatalf("got key %q (%d bytes), want a short hashed key", k, len(k))
		}
		ttl := c.PTTL(t.Context(), k).Val()
		if ttl <= 0 || ttl > time.Minute {
			t.Fatalf("key %q: got TTL %s, want in (0, 1m]: every key expires by itself", k, ttl)
		}
	}
}
