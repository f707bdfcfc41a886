package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-gateway/gateway/internal/stat"
)

// The HTTP/2 run (-h2): the gateway, nginx and Caddy proxying to the same
// nginx upstream, each speaking HTTP/2 by prior knowledge (h2c) to h2load;
// then gRPC unary calls (grpc.health.v1.Health/Check on a grpc-go server)
// through the gateway and straight to the server, from a Go client.
const (
	h2Conns   = 16 // h2load -c
	h2Streams = 10 // h2load -m: concurrent streams per connection
	// grpcConns client connections carry grpcCallers concurrent callers.
	grpcConns   = 4
	grpcCallers = 64
)

var h2loadRate = regexp.MustCompile(`finished in [^,]+, ([0-9.]+) req/s`)
var h2loadDone = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed`)

// runH2 measures the HTTP/2 targets and the gRPC calls, o.rounds rounds of
// each, and writes their lines and ratios to w.
func runH2(ctx context.Context, w io.Writer, o options, l *lab) error {
	if err := l.startUpstream(ctx); err != nil {
		return err
	}
	grpcAddr, stopGRPC, err := startHealthServer()
	if err != nil {
		return err
	}
	defer stopGRPC()
	urls := map[string]string{}
	order := []string{"nginx-h2c", "caddy-h2c", "gateway-h2c-nopolicy", "gateway-h2c-local"}
	if urls["nginx-h2c"], err = l.startH2Proxy(ctx, "nginx-h2c"); err != nil {
		return err
	}
	if urls["caddy-h2c"], err = l.startH2Proxy(ctx, "caddy-h2c"); err != nil {
		return err
	}
	var gatewayGRPC string
	for _, name := range order[2:] {
		cfg := gatewayConfig{Protocols: "[http1, h2, h2c]", Policies: 1}
		if name == "gateway-h2c-local" {
			cfg.Policy, cfg.GRPC = pLocal, "http://"+grpcAddr
		}
		addr, err := l.startGatewayH2(ctx, name, cfg)
		if err != nil {
			return err
		}
		urls[name] = "http://" + addr + "/"
		if cfg.GRPC != "" {
			gatewayGRPC = addr
		}
	}
	fmt.Fprintf(w, "# HTTP/2: h2load -c%d -m%d -t1 -D%d (h2c), warm-up %v; gRPC: %d callers on %d connections\n",
		h2Conns, h2Streams, int(o.duration.Seconds()), o.warmup, grpcCallers, grpcConns)
	rates := map[string][]float64{}
	for round := 0; round < o.rounds; round++ {
		for _, name := range order {
			if round == 0 && o.warmup > 0 {
				if _, err := h2load(ctx, urls[name], o.warmup); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			rps, err := h2load(ctx, urls[name], o.duration)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			rates[name] = append(rates[name], rps)
			fmt.Fprintf(w, "BenchmarkH2/target=%s 1 %.0f ns/op %.0f req/s\n", name, 1e9/rps, rps)
		}
		for _, via := range []struct{ name, addr string }{{"grpc-direct", grpcAddr}, {"grpc-gateway", gatewayGRPC}} {
			rps, err := grpcLoad(ctx, via.addr, o.duration)
			if err != nil {
				return fmt.Errorf("%s: %w", via.name, err)
			}
			rates[via.name] = append(rates[via.name], rps)
			fmt.Fprintf(w, "BenchmarkH2/target=%s 1 %.0f ns/op %.0f req/s\n", via.name, 1e9/rps, rps)
		}
	}
	fmt.Fprintln(w)
	for _, r := range [][2]string{
		{"gateway-h2c-nopolicy", "nginx-h2c"}, {"gateway-h2c-nopolicy", "caddy-h2c"},
		{"gateway-h2c-local", "nginx-h2c"}, {"gateway-h2c-local", "caddy-h2c"},
		{"grpc-gateway", "grpc-direct"},
	} {
		a, b := stat.Median(rates[r[0]]), stat.Median(rates[r[1]])
		fmt.Fprintf(w, "RATIO %s/%s-rps %.2f (medians %.0f and %.0f req/s)\n", r[0], r[1], a/b, a, b)
	}
	return nil
}

// startH2Proxy starts nginx or Caddy speaking h2c to clients in front of the
// upstream; it returns the URL to load.
func (l *lab) startH2Proxy(ctx context.Context, name string) (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(l.dir, name)
	var argv, env []string
	if name == "nginx-h2c" {
		data := map[string]string{"Dir": dir, "Upstream": l.upstream, "Listen": addr(ports[0])}
		if err := render("nginx-h2c.conf", filepath.Join(dir, "nginx.conf"), data); err != nil {
			return "", err
		}
		argv = []string{"nginx", "-p", dir, "-e", "stderr", "-c", "nginx.conf", "-g", "daemon off;"}
	} else {
		if err := render("Caddyfile-h2c", filepath.Join(dir, "Caddyfile"), map[string]any{"Port": ports[0], "Upstream": l.upstream}); err != nil {
			return "", err
		}
		env = []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
		argv = []string{"caddy", "run", "--config", "Caddyfile", "--adapter", "caddyfile"}
	}
	p, err := l.ps.start(name, dir, env, argv...)
	if err != nil {
		return "", err
	}
	return "http://" + addr(ports[0]) + "/", p.waitTCP(ctx, addr(ports[0]))
}

// startGatewayH2 starts the gateway with cfg (h2c on) in front of the
// upstream; it returns its address.
func (l *lab) startGatewayH2(ctx context.Context, name string, cfg gatewayConfig) (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	cfg.Name, cfg.About, cfg.Listen, cfg.Upstream = name, "the gateway over h2c", addr(ports[0]), "http://"+l.upstream
	path := filepath.Join(l.dir, name+".yaml")
	if err := render("gateway.yaml", path, cfg); err != nil {
		return "", err
	}
	p, err := l.ps.start(name, l.dir, nil, l.gateway, "serve", "-config", path)
	if err != nil {
		return "", err
	}
	return cfg.Listen, p.waitTCP(ctx, cfg.Listen)
}

// h2load loads url over h2c for d and returns the rate of answered
// requests; a failed request fails the run.
func h2load(ctx context.Context, url string, d time.Duration) (float64, error) {
	secs := strconv.Itoa(max(int(d.Seconds()), 1))
	out, err := exec.CommandContext(ctx, "h2load", "-c", strconv.Itoa(h2Conns), "-m", strconv.Itoa(h2Streams), "-t", "1", "-D", secs, url).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("h2load: %v: %s", err, out)
	}
	rate, done := h2loadRate.FindSubmatch(out), h2loadDone.FindSubmatch(out)
	if rate == nil || done == nil {
		return 0, fmt.Errorf("h2load: unexpected output: %s", out)
	}
	if string(done[2]) != "0" {
		return 0, fmt.Errorf("h2load: %s requests failed: %s", done[2], out)
	}
	return strconv.ParseFloat(string(rate[1]), 64)
}

// startHealthServer serves grpc-go's health service on loopback.
func startHealthServer() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	return ln.Addr().String(), srv.Stop, nil
}

// grpcLoad calls Health/Check at target from grpcCallers goroutines over
// grpcConns connections for d, and returns the rate of calls; a failed call
// fails the run.
func grpcLoad(ctx context.Context, target string, d time.Duration) (float64, error) {
	var clients []healthpb.HealthClient
	for range grpcConns {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		clients = append(clients, healthpb.NewHealthClient(conn))
	}
	var calls atomic.Int64
	var firstErr error
	var once sync.Once
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range grpcCallers {
		c := clients[i%grpcConns]
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(calls.Load()) / time.Since(start).Seconds(), nil
}
