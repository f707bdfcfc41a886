package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy"
)

// headerSlack is how far above server.max_header_bytes Go's own (plain text)
// 431 sits; below it the proxy answers 431 with a JSON body.
const headerSlack = 4096

// serve builds the process-lifetime resources once (builtin upstreams,
// transport, Redis client, limiter), serves until ctx is done, then drains.
func serve(ctx context.Context, path, level string, logOut io.Writer) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: lvl}))

	// Built-in upstreams listen on loopback so that even the default route
	// goes through the real proxy path.
	echoLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("starting builtin:echo: %w", err)
	}
	echoSrv := &http.Server{Handler: builtin.Echo(), ReadHeaderTimeout: 5 * time.Second}
	builtins := map[string]*url.URL{"echo": {Scheme: "http", Host: echoLn.Addr().String()}}

	loader := policies.Loader{Path: path, Env: os.Environ(), Builtins: builtins}
	snap, err := loader.Load()
	if err != nil {
		echoLn.Close()
		return err
	}
	cfg := snap.Config
	policies.LogWarnings(log, snap)

	local := limiter.NewLocal(cfg.Server.MaxKeysPerPolicy)
	var shared limiter.Backend
	if cfg.Redis.Enabled() {
		client, rl, err := newRedis(cfg.Redis, local, log)
		if err != nil {
			echoLn.Close()
			return err
		}
		defer client.Close()
		defer rl.Close() // before the client: it waits for its last check of Redis
		if err := checkRedis(ctx, snap.Source, cfg.Redis, log); err != nil {
			echoLn.Close()
			return err
		}
		shared = rl
	}
	engine, err := limiter.NewEngine(time.Now, local, shared)
	if err != nil {
		echoLn.Close()
		return err
	}

	current := policies.NewCurrent(snap)
	handler, err := proxy.New(proxy.Config{
		Snapshots:      current,
		Limiter:        engine,
		Transport:      proxy.NewTransport(),
		Logger:         log,
		MaxHeaderBytes: cfg.Server.MaxHeaderBytes,
	})
	if err != nil {
		echoLn.Close()
		return err
	}
	watcher, err := policies.NewWatcher(policies.WatcherConfig{
		Loader:  loader,
		Current: current,
		Logger:  log,
		OnReload: func(s *policies.Snapshot, err error) {
			if err == nil {
				local.Retain(s.KeepsBuckets)
			}
		},
	})
	if err != nil {
		echoLn.Close()
		return err
	}

	srv := &http.Server{
		Addr:              cfg.Server.Listen,
		Handler:           handler,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		WriteTimeout:      cfg.Server.WriteTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes + headerSlack,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		echoLn.Close()
		return fmt.Errorf("listening on %s: %w", srv.Addr, err)
	}
	// Registered before the first log line, so a SIGHUP sent once the
	// gateway says it listens never takes the default action (exit).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("gateway listening", "addr", ln.Addr().String(), "config", snap.Source,
		"routes", len(snap.Routes), "policies", len(snap.Policies), "redis", cfg.Redis.Enabled(), "version", version)

	// Every goroutine below is owned here and waited for before returning.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Add(4)
	go func() { defer wg.Done(); errc <- ignoreClosed(echoSrv.Serve(echoLn)) }()
	go func() { defer wg.Done(); errc <- ignoreClosed(srv.Serve(ln)) }()
	go func() { defer wg.Done(); errc <- watcher.Run(ctx) }()
	go func() { defer wg.Done(); reloadOnHUP(ctx, hup, watcher, log) }()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining connections", "timeout", cfg.Server.ShutdownTimeout)
	case runErr = <-errc:
	}
	cancel()
	drain, stop := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer stop()
	if err := srv.Shutdown(drain); err != nil {
		log.Warn("drain incomplete", "err", err)
		srv.Close()
	}
	// Upgraded (WebSocket) connections are hijacked, so srv.Shutdown does not
	// wait for them: they get what is left of the drain time, then are cut.
	if cut := handler.Shutdown(drain); cut > 0 {
		log.Warn("drain incomplete: closed upgraded connections still open", "connections", cut)
	}
	echoSrv.Close()
	wg.Wait()
	return runErr
}

func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, w *policies.Watcher, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: reloading config")
			_ = w.Reload() // the watcher logs and counts the outcome

		}
	}
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
