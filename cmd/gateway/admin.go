package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/ratelimit-gateway/gateway/admin"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// readyPingTimeout bounds the PING of a readiness probe.
const readyPingTimeout = 500 * time.Millisecond

// listenAdmin opens admin.listen (unless it is "") with the admin handler:
// metrics, health, readiness and, with admin.token, the admin API.
func (p *process) listenAdmin() error {
	cfg := p.snap.Config.Admin
	if *cfg.Listen == "" {
		return nil
	}
	h, err := admin.New(admin.Config{
		Token:     cfg.Token,
		Pprof:     cfg.Pprof,
		Metrics:   p.metrics.Handler(),
		Ready:     p.ready,
		Snapshots: p.current,
		Keys:      admin.EngineKeys{Engine: p.engine},
		Reload:    p.watcher.Reload,
		Logger:    p.log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *cfg.Listen)
	if err != nil {
		return fmt.Errorf("%s: admin.listen: listening on %s: %w", p.snap.Source, *cfg.Listen, err)
	}
	p.onClose(ln.Close)
	p.adminLn = ln
	p.admin = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	p.log.Info("admin listening", "addr", ln.Addr().String(), "api", cfg.Token != "", "pprof", cfg.Pprof)
	return nil
}

// ready is /readyz: the config is loaded, shutdown has not started, and
// Redis answers when a policy in force fails closed without it.
func (p *process) ready() error {
	if p.draining.Load() {
		return errors.New("draining: shutting down")
	}
	snap := p.current.Load()
	if snap == nil {
		return errors.New("no configuration loaded")
	}
	if p.redis == nil {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(snap.Policies)) {
		rule := snap.Policies[name].Rule
		if !rule.Algorithm.Shared() || rule.OnRedisError != limiter.FailDeny {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), readyPingTimeout)
		err := p.redis.Ping(ctx).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("redis does not answer (%v) and policy %q fails closed without it", err, name)
		}
		return nil
	}
	return nil
}

// startOnlyChanges names the settings of next that differ from start's but
// apply only when the process starts: listeners, Redis, the log format.
func startOnlyChanges(start, next *policies.Config) []string {
	var changed []string
	for _, c := range []struct {
		name string
		a, b any
	}{
		{"server.listen and timeouts", []any{start.Server.Listen, start.Server.ReadHeaderTimeout, start.Server.ReadTimeout, start.Server.WriteTimeout, start.Server.IdleTimeout, start.Server.MaxHeaderBytes, start.Server.ShutdownTimeout, start.Server.MaxKeysPerPolicy},
			[]any{next.Server.Listen, next.Server.ReadHeaderTimeout, next.Server.ReadTimeout, next.Server.WriteTimeout, next.Server.IdleTimeout, next.Server.MaxHeaderBytes, next.Server.ShutdownTimeout, next.Server.MaxKeysPerPolicy}},
		{"redis", start.Redis, next.Redis},
		{"admin", start.Admin, next.Admin},
		{"log.format", start.Log.Format, next.Log.Format},
		{"tracing", start.Tracing, next.Tracing},
	} {
		if !reflect.DeepEqual(c.a, c.b) {
			changed = append(changed, c.name)
		}
	}
	return changed
}
