package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/policies"
)

// startupPingTimeout bounds the one PING at start. It is a start's deadline,
// not a decision's: long enough for a slow network, short enough that a
// Redis that is down delays the start by little.
const startupPingTimeout = 2 * time.Second

// newRedis builds the one Redis client of the process and the shared limiter
// on it. The client outlives reloads; the caller closes it once.
func newRedis(cfg policies.RedisConfig, log *slog.Logger) (redis.UniversalClient, *redislimit.Limiter, error) {
	cfg = redisDefaults(cfg)
	// go-redis logs each failed dial; while Redis is down that is a flood.
	redis.SetLogger(redislimit.NewLibraryLogger(log))
	client, err := redisclient.New(redisClientOptions(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to redis: %w", err)
	}
	shared, err := redislimit.New(client, redislimit.Config{
		Timeout:         cfg.Timeout,
		QueueTimeout:    cfg.QueueTimeout,
		MaxInFlight:     cfg.PoolSize, // no decision waits inside go-redis's pool
		BreakerFailures: cfg.BreakerFailures,
		BreakerCooldown: cfg.BreakerCooldown,
		DenialCacheSize: cfg.DenialCacheSize,
		Pipelines:       cfg.Pipelines,
		Clock:           time.Now,
		Logger:          log,
	})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, shared, nil
}

// redisDefaults fills the settings the file left zero with the defaults of
// the packages that own them; the config model does not restate them.
func redisDefaults(cfg policies.RedisConfig) policies.RedisConfig {
	cfg.Timeout = cmp.Or(cfg.Timeout, redisclient.DefaultTimeout)
	cfg.QueueTimeout = cmp.Or(cfg.QueueTimeout, redislimit.DefaultQueueTimeout)
	cfg.BreakerFailures = cmp.Or(cfg.BreakerFailures, redislimit.DefaultBreakerFailures)
	cfg.BreakerCooldown = cmp.Or(cfg.BreakerCooldown, redislimit.DefaultBreakerCooldown)
	cfg.DenialCacheSize = cmp.Or(cfg.DenialCacheSize, redislimit.DefaultDenialCacheSize)
	cfg.Pipelines = cmp.Or(cfg.Pipelines, redislimit.DefaultPipelines)
	return cfg
}

func redisClientOptions(cfg policies.RedisConfig) redisclient.Options {
	cfg = redisDefaults(cfg)
	return redisclient.Options{
		Addrs:              cfg.Addrs,
		SentinelMasterName: cfg.Sentinel.MasterName,
		SentinelAddrs:      cfg.Sentinel.Addrs,
		SentinelPassword:   cfg.Sentinel.Password,
		Username:           cfg.Username,
		Password:           cfg.Password,
		TLS:                cfg.TLS,
		PoolSize:           cfg.PoolSize,
		Timeout:            cfg.Timeout,
		// A dial outlasts the longest call the limiter makes: the direct
		// check that settles its breaker, a breaker_cooldown.
		DialTimeout: max(redisclient.DefaultDialTimeout, cfg.BreakerCooldown),
	}
}

// checkRedis runs the gateway's decision script once at start on every
// Redis node (each master of a Cluster, on a key of its slots), with the
// configured credentials, on a client of its own whose deadlines fit a start
// rather than a decision.
//
// Credentials or permissions a node refuses are an error naming the node
// and the setting (source is the config file): every shared decision on it
// would fail, and with on_redis_error: allow the gateway would run without
// its shared limits, saying so once. A node that does not answer is an
// outage, which the failure modes are for: it is logged and the start goes
// on. Masters that join a Cluster later are checked by the limiter's Run.
//
// A Redis that answers is then asked whether it may evict the gateway's
// keys (checkEviction).
func checkRedis(ctx context.Context, source string, cfg policies.RedisConfig, log *slog.Logger, m *metrics.Metrics) error {
	opts := redisClientOptions(cfg)
	opts.Timeout = startupPingTimeout
	opts.PoolSize = 1
	client, err := redisclient.New(opts)
	if err != nil {
		return fmt.Errorf("connecting to redis: %w", err)
	}
	defer client.Close()
	check, err := redislimit.New(client, redislimit.Config{Timeout: startupPingTimeout, Logger: log})
	if err != nil {
		return err
	}
	defer check.Close()
	ctx, cancel := context.WithTimeout(ctx, startupPingTimeout)
	defer cancel()
	err = check.CheckAccess(ctx)
	where := redactedAddrs(cfg.Addrs)
	if cfg.Sentinel.MasterName != "" {
		where = fmt.Sprintf("sentinels %s (master %q)", redactedAddrs(cfg.Sentinel.Addrs), cfg.Sentinel.MasterName)
	}
	// A Cluster's error names the node that refused, and says what it did.
	var ne *redislimit.NodeError
	if errors.As(err, &ne) {
		if len(cfg.Addrs) > 1 {
			where = fmt.Sprintf("node %s of the cluster %s", ne.Addr, redactedAddrs(cfg.Addrs))
		}
		err = ne.Err
	}
	switch {
	case err == nil:
		checkEviction(ctx, client, log, m)
		return nil
	case errors.Is(err, redislimit.ErrNoAnswer):
	case isRedisAuthError(err):
		settings := "redis.username and redis.password, or GATEWAY_REDIS_USERNAME and GATEWAY_REDIS_PASSWORD"
		if cfg.Sentinel.MasterName != "" {
			settings += "; for the sentinels, redis.sentinel.password"
		}
		return fmt.Errorf("%s: redis.password: redis at %s refused the credentials: %v (check %s)", source, where, err, settings)
	case isRedisPermissionError(err):
		return fmt.Errorf("%s: redis.username: redis at %s refused user %q a command: %v (the user needs the gateway's commands)", source, where, cfg.Username, err)
	default:
		return fmt.Errorf("%s: redis at %s: %w", source, where, err)
	}
	log.Warn("redis did not answer at start; shared policies apply their on_redis_error mode until it does",
		"addrs", where, "error", err.Error())
	return nil
}

// checkEviction warns, in the log and in gateway_redis_evicting, about every
// Redis node whose maxmemory-policy may evict the gateway's keys. A Redis
// that does not say (CONFIG refused by an ACL or a managed service) is
// logged at info: the start goes on either way.
func checkEviction(ctx context.Context, client redis.UniversalClient, log *slog.Logger, m *metrics.Metrics) {
	nodes, err := redislimit.EvictionPolicies(ctx, client)
	for _, n := range nodes {
		m.RedisEvictionPolicy(n.Addr, n.Policy, n.Evicts())
		if n.Evicts() {
			log.Warn(n.Warning(), "node", n.Addr, "maxmemory_policy", n.Policy)
		}
	}
	if err != nil {
		log.Info("could not read redis's maxmemory-policy; if it is not noeviction, redis may evict limits and idempotency records when full",
			"error", err.Error())
	}
}

// redactedAddrs joins Redis addresses as they may be echoed: a
// redis://user:password@host address without its credentials.
func redactedAddrs(addrs []string) string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = policies.RedactURL(a)
	}
	return strings.Join(out, ",")
}

// isRedisAuthError reports whether Redis refused the credentials. go-redis
// recognises a reply that starts with NOAUTH or WRONGPASS; through Sentinel,
// or from an older server ("ERR invalid password"), the words come later.
func isRedisAuthError(err error) bool {
	if redis.IsAuthError(err) {
		return true
	}
	s := err.Error()
	for _, sign := range []string{"WRONGPASS", "NOAUTH", "invalid password", "invalid username-password"} {
		if strings.Contains(s, sign) {
			return true
		}
	}
	return false
}

// isRedisPermissionError reports whether an ACL refused a command.
func isRedisPermissionError(err error) bool {
	return redis.IsPermissionError(err) || strings.Contains(err.Error(), "NOPERM")
}
