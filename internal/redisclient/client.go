// Package redisclient builds the one go-redis client of a gateway process
// (standalone, Sentinel or Cluster) from the config's addresses and
// credentials, with the deadlines and dialing that a rate limiter on the
// request path needs. It lives apart from the packages that use Redis (the
// shared limiter, the idempotency store and its locks) because cmd/gateway
// builds the client once and hands the same one to each of them: none of
// them owns it.
package redisclient

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// socketBackstop bounds a Redis call that carries no context deadline; every
// call the limiter makes carries a shorter one.
const socketBackstop = 5 * time.Second

// DefaultTimeout bounds one decision's Redis round trip when no timeout
// is configured (here and in the shared limiter): short enough that a sick
// Redis costs a request little, long enough for a loaded server on the same
// network.
const DefaultTimeout = 30 * time.Millisecond

// DefaultDialTimeout bounds making one connection (TCP, and TLS when on)
// when Options.DialTimeout is zero: at least the longest deadline of a call
// the limiter makes (the direct check that settles its breaker, a
// breaker_cooldown of 500 ms by default), so that no such call fails for a
// dial cut shorter than itself.
const DefaultDialTimeout = time.Second

// Options describes the one Redis connection a gateway process
// builds at start and shares across reloads. The zero value is invalid: set
// Addrs or SentinelMasterName.
type Options struct {
	// Addrs lists "host:port", "redis://host:port" or "rediss://host:port"
	// (TLS). One address is a standalone server, several are the seed nodes
	// of a Redis Cluster. A missing port means 6379. Credentials and paths
	// are not accepted in an address: use Username and Password.
	Addrs []string
	// SentinelMasterName selects a master through Sentinel instead of Addrs;
	// SentinelAddrs are the sentinels (same address forms as Addrs).
	SentinelMasterName string
	SentinelAddrs      []string
	// SentinelPassword authenticates to the sentinels; empty means none.
	SentinelPassword string
	// Username and Password authenticate to Redis (ACL user or requirepass);
	// empty means none.
	Username string
	Password string
	// TLS turns on TLS for every connection. Any rediss:// address does too.
	TLS bool
	// TLSConfig replaces the default TLS settings (TLS 1.2+, system roots),
	// for example to trust a private CA; setting it implies TLS.
	TLSConfig *tls.Config
	// PoolSize is the number of connections per server; zero means the
	// go-redis default (10 per CPU).
	PoolSize int
	// Timeout is the decision deadline, applied through each call's context
	// and to waiting for a pooled connection; zero means DefaultTimeout.
	Timeout time.Duration
	// DialTimeout bounds making one connection; zero means
	// DefaultDialTimeout, and it is never below Timeout. go-redis dials in
	// the background, so no caller waits for a dial past its own deadline:
	// a longer dial only lets the callers that may wait longer (the
	// breaker's probe, the direct checks) connect on a busy machine, and
	// leaves a connection made late in the pool for the next call.
	DialTimeout time.Duration
	// MaxRetries is how often a failed command is retried; zero means never
	// (unlike go-redis, whose zero means 3) because a retry cannot fit in a
	// decision deadline and the circuit breaker already handles outages.
	MaxRetries int
}

type redisKind int

const (
	redisStandalone redisKind = iota + 1
	redisCluster
	redisSentinel
)

// resolvedRedis holds the go-redis options of exactly one kind.
type resolvedRedis struct {
	kind       redisKind
	standalone *redis.Options
	cluster    *redis.ClusterOptions
	failover   *redis.FailoverOptions
}

// New builds the process's Redis client from o: a *redis.Client
// for one address, a *redis.ClusterClient for several, a failover
// *redis.Client for Sentinel. It does not dial: connections are made on first
// use. The caller closes the client once, at shutdown.
func New(o Options) (redis.UniversalClient, error) {
	r, err := o.resolve()
	if err != nil {
		return nil, err
	}
	switch r.kind {
	case redisCluster:
		return redis.NewClusterClient(r.cluster), nil
	case redisSentinel:
		return redis.NewFailoverClient(r.failover), nil
	default:
		return redis.NewClient(r.standalone), nil
	}
}

func (o Options) resolve() (resolvedRedis, error) {
	if len(o.Addrs) > 0 && o.SentinelMasterName != "" {
		return resolvedRedis{}, errors.New("redis options: set either addrs or a sentinel master, not both")
	}
	if len(o.Addrs) == 0 && o.SentinelMasterName == "" {
		return resolvedRedis{}, errors.New("redis options: no addrs and no sentinel master")
	}
	if o.SentinelMasterName != "" && len(o.SentinelAddrs) == 0 {
		return resolvedRedis{}, errors.New("redis options: sentinel master without sentinel addrs")
	}
	if o.PoolSize < 0 {
		return resolvedRedis{}, fmt.Errorf("redis options: pool size %d is negative", o.PoolSize)
	}
	if o.Timeout < 0 {
		return resolvedRedis{}, fmt.Errorf("redis options: timeout %s is negative", o.Timeout)
	}
	if o.DialTimeout < 0 {
		return resolvedRedis{}, fmt.Errorf("redis options: dial timeout %s is negative", o.DialTimeout)
	}
	if o.MaxRetries < 0 {
		return resolvedRedis{}, fmt.Errorf("redis options: max retries %d is negative", o.MaxRetries)
	}

	useTLS := o.TLS || o.TLSConfig != nil
	addrs, anyTLS, err := parseRedisAddrs(o.Addrs)
	if err != nil {
		return resolvedRedis{}, err
	}
	sentinels, sentinelTLS, err := parseRedisAddrs(o.SentinelAddrs)
	if err != nil {
		return resolvedRedis{}, fmt.Errorf("sentinel: %w", err)
	}
	useTLS = useTLS || anyTLS || sentinelTLS

	var tlsCfg *tls.Config
	if useTLS {
		if o.TLSConfig != nil {
			tlsCfg = o.TLSConfig.Clone()
		} else {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		// ServerName stays empty unless given: crypto/tls then verifies each
		// dialed host, which is what a cluster with several hosts needs.
	}

	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	dialTimeout := max(cmp.Or(o.DialTimeout, DefaultDialTimeout), timeout)
	retries := o.MaxRetries
	if retries == 0 {
		retries = -1 // go-redis: -1 disables retries, 0 means its default of 3
	}
	noMaint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

	// Why these settings: every call the limiter makes carries a context
	// deadline, which go-redis (ContextTimeoutEnabled) puts on the socket:
	// the decision timeout for decisions, longer ones for the breaker's probe
	// and for the check that tells a hung Redis from a starved gateway. The
	// socket timeouts are only a backstop above all of them, since go-redis
	// applies the shorter of the two. Dials run in the background in go-redis
	// and never delay a caller past its deadline, so they are bounded by
	// DialTimeout, not by the decision timeout: a dial cut at 30 ms failed
	// the breaker's probe against a healthy Redis whenever a busy gateway
	// took longer to connect (TestDialOutlastsTheDecisionTimeout). DialerRetries 1 makes a refused dial fail at once
	// instead of sleeping out the decision deadline in go-redis's dial
	// backoff; PipelinePoolSize -1 keeps pipelines and single commands on one
	// pool, so a Redis outage trips go-redis's dial gate (PoolSize failed
	// dials, then one re-dial per second) as late as possible; maintenance
	// notifications are a Redis Enterprise feature whose handshake would cost
	// a round trip per new connection.

	u := redis.UniversalOptions{
		Addrs:                    addrs,
		Username:                 o.Username,
		Password:                 o.Password,
		TLSConfig:                tlsCfg,
		PoolSize:                 o.PoolSize,
		DialTimeout:              max(timeout, socketBackstop),
		ReadTimeout:              max(timeout, socketBackstop),
		WriteTimeout:             max(timeout, socketBackstop),
		PoolTimeout:              timeout,
		ContextTimeoutEnabled:    true,
		MaxRetries:               retries,
		DialerRetries:            1,
		PipelinePoolSize:         -1,
		MaintNotificationsConfig: noMaint,
		Dialer:                   redisDialer(dialTimeout, tlsCfg),
	}
	switch {
	case o.SentinelMasterName != "":
		u.MasterName, u.Addrs, u.SentinelPassword = o.SentinelMasterName, sentinels, o.SentinelPassword
		return resolvedRedis{kind: redisSentinel, failover: u.Failover()}, nil
	case len(addrs) > 1:
		return resolvedRedis{kind: redisCluster, cluster: u.Cluster()}, nil
	default:
		return resolvedRedis{kind: redisStandalone, standalone: u.Simple()}, nil
	}
}

// parseRedisAddrs normalizes addresses to host:port and reports whether any
// asked for TLS.
func parseRedisAddrs(in []string) (out []string, anyTLS bool, err error) {
	for i, a := range in {
		hostport, useTLS, err := parseRedisAddr(a)
		if err != nil {
			return nil, false, fmt.Errorf("redis addrs[%d]: %w", i, err)
		}
		out = append(out, hostport)
		anyTLS = anyTLS || useTLS
	}
	return out, anyTLS, nil
}

// parseRedisAddr accepts "host:port", "redis://host:port" and
// "rediss://host:port" (TLS); a missing port means 6379.
func parseRedisAddr(a string) (hostport string, useTLS bool, err error) {
	a = strings.TrimSpace(a)
	if a == "" {
		return "", false, errors.New("empty address")
	}
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil {
			return "", false, fmt.Errorf("parsing %q: %w", a, err)
		}
		switch u.Scheme {
		case "redis":
		case "rediss":
			useTLS = true
		default:
			return "", false, fmt.Errorf("%q: scheme must be redis:// or rediss://", a)
		}
		if u.User != nil {
			return "", false, fmt.Errorf("%q: put credentials in username/password, not in the address", redactURL(u))
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return "", false, fmt.Errorf("%q: only scheme://host:port is accepted", a)
		}
		a = u.Host
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		// No port: the whole string is the host (IPv6 literals need brackets).
		if strings.Count(a, ":") > 0 && !strings.HasPrefix(a, "[") {
			return "", false, fmt.Errorf("%q: not host:port", a)
		}
		host, port = strings.Trim(a, "[]"), "6379"
	}
	if host == "" {
		return "", false, fmt.Errorf("%q: empty host", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", false, fmt.Errorf("%q: bad port %q", a, port)
	}
	return net.JoinHostPort(host, port), useTLS, nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = url.User("redacted")
	return c.String()
}
