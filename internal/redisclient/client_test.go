package redisclient

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

func TestParseRedisAddr(t *testing.T) {
	tests := []struct {
		in       string
		want     string
		wantTLS  bool
		wantErr  string
		redacted string // must not appear in the error
	}{
		{in: "127.0.0.1:6379", want: "127.0.0.1:6379"},
		{in: " redis.internal:7000 ", want: "redis.internal:7000"},
		{in: "redis.internal", want: "redis.internal:6379"},
		{in: "[::1]:6380", want: "[::1]:6380"},
		{in: "[::1]", want: "[::1]:6379"},
		{in: "redis://10.0.0.5:6379", want: "10.0.0.5:6379"},
		{in: "redis://10.0.0.5:6379/", want: "10.0.0.5:6379"},
		{in: "rediss://cache.example.com:6380", want: "cache.example.com:6380", wantTLS: true},
		{in: "rediss://cache.example.com", want: "cache.example.com:6379", wantTLS: true},
		{in: "", wantErr: "empty"},
		{in: "http://x:1", wantErr: "scheme"},
		{in: "redis://user:hunter2@x:1", wantErr: "credentials", redacted: "hunter2"},
		{in: "redis://x:1/3", wantErr: "only scheme://host:port"},
		{in: "redis://x:1?db=2", wantErr: "only scheme://host:port"},
		{in: "x:0", wantErr: "bad port"},
		{in: "x:99999", wantErr: "bad port"},
		{in: "x:http", wantErr: "bad port"},
		{in: "::1", wantErr: "not host:port"},
		{in: ":6379", wantErr: "empty host"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, gotTLS, err := parseRedisAddr(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v, want an error containing %q", got, err, tt.wantErr)
				}
				if tt.redacted != "" && strings.Contains(err.Error(), tt.redacted) {
					t.Fatalf("got error %q, want the password redacted", err)
				}
				return
			}
			if err != nil || got != tt.want || gotTLS != tt.wantTLS {
				t.Fatalf("got %q tls=%v err=%v, want %q tls=%v", got, gotTLS, err, tt.want, tt.wantTLS)
			}
		})
	}
}

func TestRedisOptionsMapping(t *testing.T) {
	custom := &tls.Config{ServerName: "redis.example.com", MinVersion: tls.VersionTLS13}
	tests := []struct {
		name      string
		opts      Options
		wantKind  redisKind
		wantAddrs []string
		wantTLS   bool
		timeout   time.Duration
		retries   int
		wantErr   string
	}{
		{name: "one addr is standalone", opts: Options{Addrs: []string{"127.0.0.1:6379"}},
			wantKind: redisStandalone, wantAddrs: []string{"127.0.0.1:6379"}, timeout: DefaultTimeout, retries: -1},
		{name: "several addrs are a cluster", opts: Options{Addrs: []string{"a:1", "redis://b:2", "c"}, Timeout: 20 * time.Millisecond},
			wantKind: redisCluster, wantAddrs: []string{"a:1", "b:2", "c:6379"}, timeout: 20 * time.Millisecond, retries: -1},
		{name: "sentinel", opts: Options{SentinelMasterName: "mymaster", SentinelAddrs: []string{"s1:26379", "s2:26379"}, SentinelPassword: "sp", MaxRetries: 1},
			wantKind: redisSentinel, wantAddrs: []string{"s1:26379", "s2:26379"}, timeout: DefaultTimeout, retries: 1},
		{name: "rediss turns TLS on", opts: Options{Addrs: []string{"rediss://a:1"}},
			wantKind: redisStandalone, wantAddrs: []string{"a:1"}, wantTLS: true, timeout: DefaultTimeout, retries: -1},
		{name: "one rediss seed turns TLS on for the cluster", opts: Options{Addrs: []string{"a:1", "rediss://b:2"}},
			wantKind: redisCluster, wantAddrs: []string{"a:1", "b:2"}, wantTLS: true, timeout: DefaultTimeout, retries: -1},
		{name: "TLS flag", opts: Options{Addrs: []string{"a:1"}, TLS: true},
			wantKind: redisStandalone, wantAddrs: []string{"a:1"}, wantTLS: true, timeout: DefaultTimeout, retries: -1},
		{name: "custom TLS config implies TLS", opts: Options{Addrs: []string{"a:1"}, TLSConfig: custom},
			wantKind: redisStandalone, wantAddrs: []string{"a:1"}, wantTLS: true, timeout: DefaultTimeout, retries: -1},
		{name: "both addrs and sentinel", opts: Options{Addrs: []string{"a:1"}, SentinelMasterName: "m", SentinelAddrs: []string{"s:1"}}, wantErr: "not both"},
		{name: "nothing", opts: Options{}, wantErr: "no addrs"},
		{name: "sentinel without addrs", opts: Options{SentinelMasterName: "m"}, wantErr: "without sentinel addrs"},
		{name: "negative timeout", opts: Options{Addrs: []string{"a:1"}, Timeout: -time.Second}, wantErr: "negative"},
		{name: "negative pool", opts: Options{Addrs: []string{"a:1"}, PoolSize: -1}, wantErr: "negative"},
		{name: "bad addr", opts: Options{Addrs: []string{"a:1", "ftp://b"}}, wantErr: "addrs[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.Username, opts.Password = "gw", "pw"
			if opts.PoolSize == 0 {
				opts.PoolSize = 7
			}
			r, err := opts.resolve()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.kind != tt.wantKind {
				t.Fatalf("kind: got %d, want %d", r.kind, tt.wantKind)
			}
			var got common
			var addrs []string
			switch r.kind {
			case redisStandalone:
				o := r.standalone
				addrs = []string{o.Addr}
				got = common{o.Username, o.Password, o.TLSConfig, o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries}
			case redisCluster:
				o := r.cluster
				addrs = o.Addrs
				got = common{o.Username, o.Password, o.TLSConfig, o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries}
			case redisSentinel:
				o := r.failover
				addrs = o.SentinelAddrs
				if o.MasterName != "mymaster" || o.SentinelPassword != "sp" {
					t.Fatalf("sentinel: got master %q password %q, want mymaster and sp", o.MasterName, o.SentinelPassword)
				}
				got = common{o.Username, o.Password, o.TLSConfig, o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries}
			}
			if strings.Join(addrs, ",") != strings.Join(tt.wantAddrs, ",") {
				t.Fatalf("addrs: got %q, want %q", addrs, tt.wantAddrs)
			}
			if got.username != "gw" || got.password != "pw" || got.poolSize != 7 {
				t.Fatalf("auth/pool: got %q %q %d, want gw pw 7", got.username, got.password, got.poolSize)
			}
			if (got.tls != nil) != tt.wantTLS {
				t.Fatalf("TLS: got %v, want %v", got.tls != nil, tt.wantTLS)
			}
			if got.tls != nil && got.tls.MinVersion < tls.VersionTLS12 {
				t.Fatalf("TLS min version: got %x, want at least TLS 1.2", got.tls.MinVersion)
			}
			if tt.opts.TLSConfig != nil && (got.tls == tt.opts.TLSConfig || got.tls.ServerName != "redis.example.com") {
				t.Fatal("custom TLS config: want a clone carrying its settings")
			}
			for name, d := range map[string]time.Duration{"dial": got.dial, "read": got.read, "write": got.write} {
				if d != max(tt.timeout, socketBackstop) {
					t.Fatalf("%s timeout: got %s, want the backstop %s", name, d, max(tt.timeout, socketBackstop))
				}
			}
			if got.pool != tt.timeout {
				t.Fatalf("pool timeout: got %s, want %s", got.pool, tt.timeout)
			}
			if !got.ctxTimeout || got.retries != tt.retries || got.dialerRetries != 1 {
				t.Fatalf("got ContextTimeoutEnabled=%v MaxRetries=%d DialerRetries=%d, want true %d 1", got.ctxTimeout, got.retries, got.dialerRetries, tt.retries)
			}
		})
	}
}

// common holds the settings every kind of go-redis options shares.
type common struct {
	username, password      string
	tls                     *tls.Config
	poolSize                int
	dial, read, write, pool time.Duration
	ctxTimeout              bool
	retries, dialerRetries  int
}
