package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/admin"
	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/internal/certstore"
	"github.com/ratelimit-gateway/gateway/internal/heapfloor"
	"github.com/ratelimit-gateway/gateway/internal/memlimit"
	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/metrics/topk"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
	"github.com/ratelimit-gateway/gateway/tracing"
)

// headerSlack is how far above server.max_header_bytes Go's own (plain text)
// 431 sits; below it the proxy answers 431 with a JSON body.
const headerSlack = 4096

// The status page's chart: the request counters every historyStep, the
// last historySamples of them (10 minutes).
const (
	historyStep    = 10 * time.Second
	historySamples = 61
)

// serve builds the process-lifetime resources once (builtin upstreams,
// transport, Redis client, limiter), serves until ctx is done, then drains.
func serve(ctx context.Context, path, level string, logOut io.Writer) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	p := &process{log: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: lvl})), logOut: logOut, level: lvl}
	defer p.close()
	if err := p.build(ctx, path); err != nil {
		return err
	}
	return p.run(ctx)
}

// process is what serve builds once and releases once. Each resource
// registers its release as soon as it exists, so a build that fails halfway
// and a run that ends release the same way: through close.
type process struct {
	log      *slog.Logger
	logOut   io.Writer
	level    slog.Level
	snap     *policies.Snapshot // as loaded at start; reloads do not rebuild the process
	builtins []builtinServer
	handler  *proxy.Handler
	idem     idempotency.Store // on Redis when configured, else in-process (server.idempotency_max_bytes)
	metrics  *metrics.Metrics
	// refused keeps each policy's most refused keys (/admin/top).
	refused *topk.Set
	// history samples the request counters for the status page's chart.
	history *admin.History
	current *policies.Current
	// pools is what is known of the upstream pools' members; its Run
	// probes those with an active check.
	pools   *pool.Pools
	engine  *limiter.Engine
	redis   redis.UniversalClient // nil without redis
	shared  *redislimit.Limiter   // nil without redis
	tracing *tracing.Provider     // nil when tracing is off
	admin   *http.Server          // nil when admin.listen is ""
	adminLn net.Listener
	// draining is set the moment shutdown starts: /readyz says so at once.
	draining atomic.Bool
	watcher  *policies.Watcher
	// announce logs "gateway listening", once run has the watcher watching.
	announce func()
	// srv serves the clients: net/http's server, or proxy/h1's with
	// net/http's behind it (server.client_server).
	srv clientServer
	ln  net.Listener
	// certs is server.tls's certificates (nil without TLS); plainSrv
	// serves server.tls.plain_listen beside the TLS listener (nil without).
	certs    *certstore.Store
	plainSrv clientServer
	plainLn  net.Listener
	hup      chan os.Signal
	closers  []func() error
	// jwtKeys are tenants.jwt's signing keys, refreshed by run; nil
	// without a key source.
	jwtKeys *jwtauth.KeySet
}

// onClose registers a release for close.
func (p *process) onClose(f func() error) { p.closers = append(p.closers, f) }

// close releases whatever was built, in reverse order: the shared limiter
// before the Redis client it uses, everything before the builtin upstreams.
// Errors are ignored: the process is ending, and a listener that a server
// already closed says so.
func (p *process) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		_ = p.closers[i]()
	}
	p.closers = nil
}

// build makes everything serve runs, in dependency order: builtin upstreams,
// config, limiter, proxy and watcher, then the listener.
func (p *process) build(ctx context.Context, path string) error {
	builtins, err := p.listenBuiltins()
	if err != nil {
		return err
	}
	loader := policies.Loader{Path: path, Env: os.Environ(), Builtins: builtins}
	if p.snap, err = loader.Load(); err != nil {
		return err
	}
	if p.snap.Config.Log.Format == policies.LogJSON {
		p.log = slog.New(slog.NewJSONHandler(p.logOut, &slog.HandlerOptions{Level: p.level}))
	}
	policies.LogWarnings(p.log, p.snap)
	// The memory limit first: the heap floor lowers itself to half of it.
	p.memoryLimit(p.snap.Config.Server.MemoryLimitBytes)
	p.heapFloor(p.snap.Config.Server.MinHeapBytes)
	p.metrics = metrics.New()
	p.metrics.TokenReasons(tokenReasons())
	p.metrics.ConfigLoaded(p.snap.Digest, time.Now())
	if err := p.newTracing(ctx); err != nil {
		return err
	}
	if p.refused, err = topk.New(topk.Config{}, time.Now); err != nil {
		return err
	}
	if p.history, err = admin.NewHistory(p.metrics.Registry(), time.Now, historyStep, historySamples); err != nil {
		return err
	}
	p.metrics.SetModels(p.snap.ModelNames())
	local, engine, err := p.newLimiter(ctx)
	if err != nil {
		return err
	}
	if err := p.newProxy(loader, local, engine); err != nil {
		return err
	}
	if p.certs, err = newCertStore(p.snap, p.log, p.metrics); err != nil {
		return err
	}
	if err := p.listenAdmin(); err != nil {
		return err
	}
	return p.listen()
}

// heapFloor keeps the heap goal at least floor bytes for the life of the
// process (see internal/heapfloor), unless the environment sets GOGC or
// floor is -1: then Go's own rule applies.
func (p *process) heapFloor(floor int64) {
	if v, set := os.LookupEnv("GOGC"); set {
		p.log.Info("GOGC is set: server.min_heap_bytes does not apply", "GOGC", v)
		return
	}
	if floor <= 0 {
		return
	}
	f := heapfloor.Start(uint64(floor), 100) // 100: GOGC's default, GOGC being unset
	p.log.Info("heap floor", "bytes", f.Bytes(), "setting", floor)
	p.onClose(func() error { f.Stop(); return nil })
}

// memoryLimit sets the Go runtime's soft memory limit for the life of the
// process (see internal/memlimit): GOMEMLIMIT, else configured, else the
// container's limit less a headroom. A cgroup that cannot be read is
// logged, and the process runs without a limit, as it would outside one.
func (p *process) memoryLimit(configured int64) {
	c, err := memlimit.Choose(configured, os.LookupEnv, "/")
	if err != nil {
		p.log.Warn("no memory limit: "+err.Error(), "setting", "server.memory_limit_bytes")
	}
	if c.Bytes > 0 {
		prev := debug.SetMemoryLimit(c.Bytes)
		p.onClose(func() error { debug.SetMemoryLimit(prev); return nil })
	}
	limit := debug.SetMemoryLimit(-1) // GOMEMLIMIT's, or the one just set
	if c.Source == memlimit.FromNone {
		limit = 0
	}
	attrs := []any{"bytes", limit, "from", c.Source}
	if c.Source == memlimit.FromContainer {
		attrs = append(attrs, "cgroup_limit", c.Container, "headroom", c.Container-uint64(c.Bytes), "file", c.File)
	}
	p.log.Info("memory limit", attrs...)
}

// builtinServer is one builtin upstream's server and its listener.
type builtinServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenBuiltins opens a listener per builtin upstream and returns their
// addresses for the config. They listen on loopback so that even the
// default route goes through the real proxy path.
func (p *process) listenBuiltins() (map[string]*url.URL, error) {
	handlers := builtin.Upstreams()
	urls := make(map[string]*url.URL, len(handlers))
	for name, h := range handlers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("starting builtin:%s: %w", name, err)
		}
		p.onClose(ln.Close)
		p.builtins = append(p.builtins, builtinServer{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}})
		urls[name] = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	}
	return urls, nil
}

// newLimiter builds the local buckets and, when Redis is configured, the
// one Redis client of the process and the shared limiter on it.
func (p *process) newLimiter(ctx context.Context) (*limiter.Local, *limiter.Engine, error) {
	cfg := p.snap.Config
	local := limiter.NewLocal(cfg.Server.MaxKeysPerPolicy)
	p.metrics.WatchLocal(local.Stats)
	var shared limiter.Backend
	if cfg.Redis.Enabled() {
		client, rl, err := newRedis(cfg.Redis, p.log)
		if err != nil {
			return nil, nil, err
		}
		p.onClose(client.Close)
		p.onClose(rl.Close) // closed before the client: it waits for its last check of Redis
		if err := checkRedis(ctx, p.snap.Source, cfg.Redis, p.log, p.metrics); err != nil {
			return nil, nil, err
		}
		shared = rl
		p.redis = client
		p.shared = rl
		if p.tracing != nil {
			tracing.Instrument(client, p.tracing.TracerProvider(), cfg.Redis.Sentinel.MasterName, redislimit.Members)
		}
		p.metrics.WatchRedis(redisStats(rl))
		// The background check of the Redis nodes: it follows a Cluster
		// failover and keeps what /readyz reads current.
		runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			_ = rl.Run(runCtx)
		}()
		p.onClose(func() error { stop(); <-ran; return nil })
		// A lock call may wait as a decision would, queue and round trip.
		rc := redisDefaults(cfg.Redis)
		if p.idem, err = idempotency.NewRedis(client, idempotency.RedisConfig{Timeout: rc.QueueTimeout + rc.Timeout}); err != nil {
			return nil, nil, err
		}
	}
	if p.idem == nil {
		store, err := idempotency.NewLocal(time.Now, idempotency.LocalConfig{MaxBytes: cfg.Server.IdempotencyMaxBytes})
		if err != nil {
			return nil, nil, err
		}
		p.idem = store
		p.metrics.WatchIdempotency(idempotencyStats(store))
	}
	engine, err := limiter.NewEngine(time.Now, local, shared)
	if err != nil {
		return nil, nil, err
	}
	p.engine = engine
	return local, engine, nil
}

// newProxy builds the handler on the current snapshot and the watcher that
// replaces it; a reload that succeeds drops the buckets of removed policies.
func (p *process) newProxy(loader policies.Loader, local *limiter.Local, engine *limiter.Engine) error {
	current := policies.NewCurrent(p.snap)
	p.current = current
	var err error
	// The pools' retry budget is the lean transport's too.
	budget := pool.NewBudget(policies.DefaultRetryBudgetShare, policies.DefaultRetryBudgetMin)
	var transport interface {
		http.RoundTripper
		CloseIdleConnections()
	} = h1.New(h1.Config{
		// The lean transport's own defaults (idle connections per host,
		// idle timeout, response-header bytes) are the standard one's.
		Retries:  budget,
		Fallback: proxy.NewStandardTransport(),
		Dial:     proxy.NewDialer().DialContext,
	})
	if p.snap.Config.Server.UpstreamTransport == policies.UpstreamTransportStandard {
		transport = proxy.NewStandardTransport()
	}
	// The pools' health outlives reloads; run probes their members.
	p.pools = pool.New(pool.Config{Snapshots: current, Budget: budget, Transport: transport})
	p.metrics.WatchPools(poolStats(p.pools))
	if lean, ok := transport.(*h1.Transport); ok {
		p.metrics.WatchTransport(transportStats(lean))
	}
	protocols := proxy.NewUpstreamTransports(transport)
	// Their idle upstream connections (and the timer that prunes them) go
	// with the process.
	p.onClose(func() error { protocols.CloseIdleConnections(); return nil })
	if p.jwtKeys, err = newJWTKeys(context.Background(), p.snap.Tenants.JWT, p.log); err != nil {
		return fmt.Errorf("%s: tenants.jwt: %w", p.snap.Source, err)
	}
	p.handler, err = proxy.New(proxy.Config{
		Tokens:         jwtauth.NewVerifier(p.jwtKeys, 0),
		Snapshots:      current,
		Limiter:        engine,
		Transport:      transport,
		Pools:          p.pools,
		Protocols:      protocols,
		Logger:         p.log,
		Metrics:        p.metrics,
		Refusals:       p.refused,
		Idempotency:    p.idem,
		MaxHeaderBytes: p.snap.Config.Server.MaxHeaderBytes,
		Tracing:        p.tracerProvider(),
	})
	if err != nil {
		return err
	}
	p.watcher, err = policies.NewWatcher(policies.WatcherConfig{
		Loader:  loader,
		Current: current,
		Logger:  p.log,
		OnReload: func(s *policies.Snapshot, err error) {
			p.metrics.Reload(err == nil)
			if err == nil {
				local.Retain(s.KeepsBuckets)
				p.refused.Retain(func(policy string) bool { return s.Policies[policy] != nil })
				p.metrics.ConfigLoaded(s.Digest, time.Now())
				p.metrics.SetModels(s.ModelNames())
				if p.certs != nil {
					_ = p.certs.Reload() // logged and counted by the store
				}
				if changed := startOnlyChanges(p.snap.Config, s.Config); len(changed) > 0 {
					p.log.Warn("config reloaded; these settings take effect at the next start only", "settings", strings.Join(changed, ", "))
				}
			}
		},
	})
	return err
}

// clientServer is what serves the clients: *http.Server or *h1.Server.
type clientServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// listen opens server.listen and says so in the log.
func (p *process) listen() error {
	cfg := p.snap.Config
	newStd := func(h http.Handler, overTLS bool) *http.Server {
		return &http.Server{
			Handler:           h,
			ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
			ReadTimeout:       cfg.Server.ReadTimeout,
			WriteTimeout:      cfg.Server.WriteTimeout,
			IdleTimeout:       cfg.Server.IdleTimeout,
			MaxHeaderBytes:    cfg.Server.MaxHeaderBytes + headerSlack,
			ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
			Protocols:         serverProtocols(cfg.Server.Protocols, overTLS),
			HTTP2:             http2Config(cfg.Server),
		}
	}
	// newServer serves plain HTTP: proxy/h1's server in front of net/http's
	// with client_server: lean. A plain connection that opens with
	// HTTP/2's preface (h2c) is one the lean server hands over unread, as
	// it does every request that is not plain HTTP/1.1: net/http's server
	// then reads the preface and serves the connection's streams, when
	// server.protocols allows h2c, or closes it.
	var watched *h1.Server
	newServer := func(h http.Handler) clientServer {
		if cfg.Server.ClientServer != policies.ClientServerLean {
			return newStd(h, false)
		}
		lean := &h1.Server{Handler: h, Fallback: newStd(h, false)}
		if watched == nil {
			watched = lean
			p.metrics.WatchClientServer(clientServerStats(lean))
		}
		return lean
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Server.Listen, err)
	}
	p.onClose(ln.Close)
	p.ln = ln
	if cfg.Server.ProxyProtocol {
		p.ln = acceptProxyProtocol(ln, p.current, cfg.Server.ReadHeaderTimeout)
	}
	if p.certs == nil {
		p.srv = newServer(p.handler)
	} else {
		// TLS connections go to net/http's server: the lean one reads
		// plain HTTP/1.1 only.
		p.srv = newStd(p.handler, true)
		p.ln = tls.NewListener(p.ln, p.certs.TLSConfig())
		if err := p.listenPlain(ln.Addr(), newServer); err != nil {
			return err
		}
	}
	// Registered before the first log line, so a SIGHUP sent once the
	// gateway says it listens never takes the default action (exit).
	p.hup = make(chan os.Signal, 1)
	signal.Notify(p.hup, syscall.SIGHUP)
	p.onClose(func() error { signal.Stop(p.hup); return nil })
	p.announce = func() {
		p.log.Info("gateway listening", "addr", ln.Addr().String(), "config", p.snap.Source,
			"tls", p.certs != nil, "routes", len(p.snap.Routes), "policies", len(p.snap.Policies), "redis", cfg.Redis.Enabled(), "version", version)
	}
	return nil
}

// run serves until ctx is done or a server or the watcher fails, then
// drains. Every goroutine it starts is stopped and waited for before it
// returns.
func (p *process) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(p.builtins)+5) // one per goroutine that sends: none blocks
	// The watcher watches before anything is served or the gateway says it
	// listens: an edit made once it has said so is never missed.
	wg.Go(func() { errc <- p.watcher.Run(ctx) })
	select {
	case <-p.watcher.Ready():
	case err := <-errc:
		wg.Wait()
		return err
	}
	p.announce()
	for _, b := range p.builtins {
		wg.Go(func() { errc <- ignoreClosed(b.srv.Serve(b.ln)) })
	}
	wg.Go(func() { errc <- ignoreClosed(p.srv.Serve(p.ln)) })
	wg.Go(func() { reloadOnHUP(ctx, p.hup, p.reload, p.log) })
	if p.certs != nil {
		wg.Go(func() { errc <- p.certs.Run(ctx) })
	}
	if p.plainSrv != nil {
		wg.Go(func() { errc <- ignoreClosed(p.plainSrv.Serve(p.plainLn)) })
	}
	if p.jwtKeys != nil {
		wg.Go(func() { _ = p.jwtKeys.Run(ctx) }) // returns nil when ctx is done
	}
	wg.Go(func() { _ = p.pools.Run(ctx) }) // the pools' active checks; nil when ctx is done

	if p.admin != nil {
		wg.Go(func() { errc <- ignoreClosed(p.admin.Serve(p.adminLn)) })
		wg.Go(func() { _ = p.history.Run(ctx) }) // returns nil when ctx is done
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	// Not ready from this instant: a load balancer stops sending while the
	// requests already here finish.
	p.draining.Store(true)
	p.log.Info("shutting down: not ready; draining connections", "timeout", p.snap.Config.Server.ShutdownTimeout)
	cancel()
	p.drain()
	wg.Wait()
	return runErr
}

// drain gives open connections server.shutdown_timeout: the gateway's
// server first, then the upgraded connections it does not track, then the
// builtin upstreams, which the drained requests no longer need.
func (p *process) drain() {
	ctx, stop := context.WithTimeout(context.Background(), p.snap.Config.Server.ShutdownTimeout)
	defer stop()
	for _, srv := range []clientServer{p.srv, p.plainSrv} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(ctx); err != nil {
			p.log.Warn("drain incomplete", "err", err)
			srv.Close()
		}
	}
	// Upgraded (WebSocket) connections are hijacked, so srv.Shutdown does not
	// wait for them: they get what is left of the drain time, then are cut.
	if cut := p.handler.Shutdown(ctx); cut > 0 {
		p.log.Warn("drain incomplete: closed upgraded connections still open", "connections", cut)
	}
	// The drained requests' spans are exported before the process ends.
	p.stopTracing(ctx)
	for _, b := range p.builtins {
		b.srv.Close()
	}
	// The admin listener goes last: probes see "draining" until the end.
	if p.admin != nil {
		p.admin.Close()
	}
}

func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, reload func() error, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: reloading config and certificates")
			_ = reload() // the watcher and the store log and count the outcome
		}
	}
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
