package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// newRedis builds the one Redis client of the process and the shared limiter
// on it. The client outlives reloads; the caller closes it once.
func newRedis(cfg policies.RedisConfig, local *limiter.Local, log *slog.Logger) (redis.UniversalClient, *limiter.Redis, error) {
	// go-redis logs each failed dial; while Redis is down that is a flood.
	redis.SetLogger(limiter.NewRedisLibraryLogger(log))
	client, err := limiter.NewRedisClient(limiter.RedisClientOptions{
		Addrs:              cfg.Addrs,
		SentinelMasterName: cfg.Sentinel.MasterName,
		SentinelAddrs:      cfg.Sentinel.Addrs,
		SentinelPassword:   cfg.Sentinel.Password,
		Username:           cfg.Username,
		Password:           cfg.Password,
		TLS:                cfg.TLS,
		PoolSize:           cfg.PoolSize,
		Timeout:            cfg.Timeout,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to redis: %w", err)
	}
	shared, err := limiter.NewRedis(client, limiter.RedisConfig{
		Timeout:         cfg.Timeout,
		QueueTimeout:    cfg.QueueTimeout,
		MaxInFlight:     cfg.PoolSize, // no decision waits inside go-redis's pool
		BreakerFailures: cfg.BreakerFailures,
		BreakerCooldown: cfg.BreakerCooldown,
		DenialCacheSize: cfg.DenialCacheSize,
		Clock:           time.Now,
		Logger:          log,
		Local:           local,
	})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, shared, nil
}
