package main

import (
	"crypto/tls"
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

// listenAdmin opens admin.listen (unless it is "") with the admin handler:
// metrics, health, readiness and, with admin.token, the admin API.
func (p *process) listenAdmin() error {
	cfg := p.snap.Config.Admin
	if *cfg.Listen == "" {
		return nil
	}
	h, err := admin.New(admin.Config{
		Token:      cfg.Token,
		SessionTTL: cfg.SessionTTL,
		OnAuthFailure: func(f admin.AuthFailure) {
			p.metrics.AdminAuthFailure(string(f))
		},
		Pprof:     cfg.Pprof,
		Metrics:   p.metrics.Handler(),
		Ready:     p.ready,
		Snapshots: p.current,
		Keys:      admin.EngineKeys{Engine: p.engine},
		Reload:    p.reload,
		Logger:    p.log,
		Top:       p.refused,
		Gatherer:  p.metrics.Registry(),
		History:   p.history,
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
	if cfg.TLS {
		// The admin listener never asks for a client certificate: its
		// token is its authentication.
		p.adminLn = tls.NewListener(ln, p.certs.TLSConfigWithoutClientAuth())
	}
	p.admin = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	p.log.Info("admin listening", "addr", ln.Addr().String(), "tls", cfg.TLS, "api", cfg.Token != "", "pprof", cfg.Pprof)
	return nil
}

// ready is /readyz: the config is loaded, shutdown has not started, and,
// when a policy in force fails closed without Redis, this instance has
// reached Redis since it started. It sends nothing: the limiter's breakers
// and its background check (at most a PING a second per idle node) are
// what it reads.
//
// A Redis outage that began after this instance reached Redis leaves it
// ready, whether one Cluster node of several is down or the only Redis is:
// every instance of the fleet sees the same outage, so failing readiness on
// it would take every pod out of the Service at once, turning precise
// answers (the affected keys' failure modes, 503 with Retry-After for
// fail-closed policies, exact limits for the other nodes' keys) into
// connection errors for every key, and putting the pods back would lag
// Redis's recovery. An instance that has never reached Redis is different:
// its peers may be serving, so it waits out of the Service (a rolling
// upgrade into a network that cannot reach Redis stops at the first pod).
func (p *process) ready() error {
	if p.draining.Load() {
		return errors.New("draining: shutting down")
	}
	snap := p.current.Load()
	if snap == nil {
		return errors.New("no configuration loaded")
	}
	if p.shared == nil || p.shared.Health().Answered {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(snap.Policies)) {
		rule := snap.Policies[name].Rule
		if rule.Algorithm.Shared() && rule.OnRedisError == limiter.FailDeny {
			return fmt.Errorf("redis has not answered since start and policy %q fails closed without it", name)
		}
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
		{"server.listen, client_server, proxy_protocol and timeouts", []any{start.Server.Listen, start.Server.ProxyProtocol, start.Server.ClientServer, start.Server.ReadHeaderTimeout, start.Server.ReadTimeout, start.Server.WriteTimeout, start.Server.IdleTimeout, start.Server.MaxHeaderBytes, start.Server.ShutdownTimeout, start.Server.MaxKeysPerPolicy, start.Server.IdempotencyMaxBytes},
			[]any{next.Server.Listen, next.Server.ProxyProtocol, next.Server.ClientServer, next.Server.ReadHeaderTimeout, next.Server.ReadTimeout, next.Server.WriteTimeout, next.Server.IdleTimeout, next.Server.MaxHeaderBytes, next.Server.ShutdownTimeout, next.Server.MaxKeysPerPolicy, next.Server.IdempotencyMaxBytes}},
		{"server.tls (the files' contents follow)", start.Server.TLS, next.Server.TLS},
		{"server.protocols and max_concurrent_streams", []any{start.Server.Protocols, start.Server.MaxConcurrentStreams}, []any{next.Server.Protocols, next.Server.MaxConcurrentStreams}},
		{"server.memory_limit_bytes and min_heap_bytes", []any{start.Server.MemoryLimitBytes, start.Server.MinHeapBytes}, []any{next.Server.MemoryLimitBytes, next.Server.MinHeapBytes}},
		{"redis", start.Redis, next.Redis},
		{"admin", start.Admin, next.Admin},
		{"log.format", start.Log.Format, next.Log.Format},
		{"tracing", start.Tracing, next.Tracing},
		{"tenants.jwt key source (jwks_url, discovery, keys_file, refresh, unknown_kid_cooldown)", jwtKeySource(start.Tenants.JWT), jwtKeySource(next.Tenants.JWT)},
	} {
		if !reflect.DeepEqual(c.a, c.b) {
			changed = append(changed, c.name)
		}
	}
	return changed
}
