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
	"strings"
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
// through the gateway, through nginx (grpc_pass) and straight to the
// server, from a Go client.
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
	perf := o.cpu && perfWorks(ctx)
	if o.cpu && !perf {
		fmt.Fprintln(w, "# cpu: perf stat cannot count here (kernel.perf_event_paranoid, no perf): no cpu-µs/req")
	}
	// addrs and own are each target's address and the servers whose CPU
	// perf counts; grpc-direct has none apart: its server runs in this
	// process, beside its client.
	addrs := map[string]string{"grpc-direct": grpcAddr}
	own := map[string][]*proc{}
	for name, up := range map[string]string{"nginx-h2c": l.upstream, "caddy-h2c": l.upstream, "grpc-nginx": grpcAddr} {
		p, addr, err := l.startH2Proxy(ctx, name, up)
		if err != nil {
			return err
		}
		addrs[name], own[name] = addr, []*proc{p}
	}
	for _, name := range []string{"gateway-h2c-nopolicy", "gateway-h2c-local"} {
		cfg := gatewayConfig{Protocols: "[http1, h2, h2c]", Policies: 1}
		if name == "gateway-h2c-local" { // and grpc-gateway
			cfg.Policy, cfg.GRPC = pLocal, "http://"+grpcAddr
		}
		p, addr, err := l.startGatewayH2(ctx, name, cfg)
		if err != nil {
			return err
		}
		addrs[name], own[name] = addr, []*proc{p}
		if cfg.GRPC != "" {
			addrs["grpc-gateway"], own["grpc-gateway"] = addr, own[name]
		}
	}
	// load runs the target's load for d: h2load, or gRPC calls.
	load := func(name string, d time.Duration) (int64, float64, error) {
		if strings.HasPrefix(name, "grpc-") {
			return grpcLoad(ctx, addrs[name], d)
		}
		return h2load(ctx, "http://"+addrs[name]+"/", d)
	}
	fmt.Fprintf(w, "# HTTP/2: h2load -c%d -m%d -t1 -D%d (h2c), warm-up %v; gRPC: %d callers on %d connections\n",
		h2Conns, h2Streams, int(o.duration.Seconds()), o.warmup, grpcCallers, grpcConns)
	order := []string{"nginx-h2c", "caddy-h2c", "gateway-h2c-nopolicy", "gateway-h2c-local", "grpc-direct", "grpc-nginx", "grpc-gateway"}
	runs := map[string][]h2Sample{}
	for round := 0; round < o.rounds; round++ {
		for _, name := range order {
			if round == 0 && o.warmup > 0 {
				if _, _, err := load(name, o.warmup); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			r, err := measureH2(ctx, perf, own[name], o.duration, func() (int64, float64, error) { return load(name, o.duration) })
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			runs[name] = append(runs[name], r)
			fmt.Fprintln(w, r.line(name))
		}
	}
	fmt.Fprintln(w)
	pairs := [][2]string{
		{"gateway-h2c-nopolicy", "nginx-h2c"}, {"gateway-h2c-nopolicy", "caddy-h2c"},
		{"gateway-h2c-local", "nginx-h2c"}, {"gateway-h2c-local", "caddy-h2c"},
		{"grpc-gateway", "grpc-nginx"}, {"grpc-gateway", "grpc-direct"}, {"grpc-nginx", "grpc-direct"},
	}
	for _, r := range pairs {
		a, b := h2Median(runs[r[0]], h2Sample.rps), h2Median(runs[r[1]], h2Sample.rps)
		fmt.Fprintf(w, "RATIO %s/%s-rps %.2f (medians %.0f and %.0f req/s)\n", r[0], r[1], a/b, a, b)
	}
	for _, r := range pairs {
		a, b := h2Median(runs[r[0]], h2Sample.cpuPerReq), h2Median(runs[r[1]], h2Sample.cpuPerReq)
		if a > 0 && b > 0 {
			fmt.Fprintf(w, "RATIO cpu-per-req %s/%s %.2f (medians %.1f and %.1f µs)\n", r[0], r[1], a/b, a, b)
		}
	}
	return nil
}

// h2Sample is one run of an HTTP/2 or gRPC target: its rate, its answered
// requests and, when perf counted them, its servers' CPU time meanwhile.
type h2Sample struct {
	rate float64
	n    int64
	cpu  time.Duration
}

func (s h2Sample) rps() float64 { return s.rate }

// cpuPerReq is the servers' CPU time a request in µs; 0 when not counted.
func (s h2Sample) cpuPerReq() float64 { return usec(s.cpu) / float64(max(s.n, 1)) }

func (s h2Sample) line(name string) string {
	l := fmt.Sprintf("BenchmarkH2/target=%s 1 %.0f ns/op %.0f req/s", name, 1e9/s.rate, s.rate)
	if s.cpu > 0 {
		l += fmt.Sprintf(" %.2f cpu-µs/req", s.cpuPerReq())
	}
	return l
}

// h2Median is the median of f over runs; 0 when there are none.
func h2Median(runs []h2Sample, f func(h2Sample) float64) float64 {
	xs := make([]float64, 0, len(runs))
	for _, r := range runs {
		xs = append(xs, f(r))
	}
	if len(xs) == 0 {
		return 0
	}
	return stat.Median(xs)
}

// measureH2 runs load once (for d) and, when perf can count them, the CPU
// time of the servers in own meanwhile.
func measureH2(ctx context.Context, perf bool, own []*proc, d time.Duration, load func() (int64, float64, error)) (h2Sample, error) {
	var cpu func() (time.Duration, error)
	if perf && len(own) > 0 {
		var err error
		if cpu, err = perfStat(ctx, own, d); err != nil {
			return h2Sample{}, err
		}
	}
	n, rate, err := load()
	if err != nil {
		return h2Sample{}, err
	}
	s := h2Sample{rate: rate, n: n}
	if cpu != nil {
		if s.cpu, err = cpu(); err != nil {
			return h2Sample{}, err
		}
	}
	return s, nil
}

// startH2Proxy starts nginx-h2c or caddy-h2c in front of the HTTP/1.1
// upstream, or grpc-nginx (grpc_pass) in front of the gRPC server at
// upstream, each speaking h2c to clients; it returns the server and the URL
// address.
func (l *lab) startH2Proxy(ctx context.Context, name, upstream string) (*proc, string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(l.dir, name)
	var argv, env []string
	if name != "caddy-h2c" {
		data := map[string]string{"Dir": dir, "Upstream": upstream, "Listen": addr(ports[0])}
		if err := render(name+".conf", filepath.Join(dir, "nginx.conf"), data); err != nil {
			return nil, "", err
		}
		argv = []string{"nginx", "-p", dir, "-e", "stderr", "-c", "nginx.conf", "-g", "daemon off;"}
	} else {
		if err := render("Caddyfile-h2c", filepath.Join(dir, "Caddyfile"), map[string]any{"Port": ports[0], "Upstream": upstream}); err != nil {
			return nil, "", err
		}
		env = []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
		argv = []string{"caddy", "run", "--config", "Caddyfile", "--adapter", "caddyfile"}
	}
	p, err := l.ps.start(name, dir, env, argv...)
	if err != nil {
		return nil, "", err
	}
	return p, addr(ports[0]), p.waitTCP(ctx, addr(ports[0]))
}

// startGatewayH2 starts the gateway with cfg (h2c on) in front of the
// upstream; it returns the process and its address.
func (l *lab) startGatewayH2(ctx context.Context, name string, cfg gatewayConfig) (*proc, string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, "", err
	}
	cfg.Name, cfg.About, cfg.Listen, cfg.Upstream = name, "the gateway over h2c", addr(ports[0]), "http://"+l.upstream
	path := filepath.Join(l.dir, name+".yaml")
	if err := render("gateway.yaml", path, cfg); err != nil {
		return nil, "", err
	}
	p, err := l.ps.start(name, l.dir, nil, l.gateway, "serve", "-config", path)
	if err != nil {
		return nil, "", err
	}
	return p, cfg.Listen, p.waitTCP(ctx, cfg.Listen)
}

// h2load loads url over h2c for d and returns the answered requests and
// their rate; a failed request fails the run.
func h2load(ctx context.Context, url string, d time.Duration) (int64, float64, error) {
	secs := strconv.Itoa(max(int(d.Seconds()), 1))
	out, err := exec.CommandContext(ctx, "h2load", "-c", strconv.Itoa(h2Conns), "-m", strconv.Itoa(h2Streams), "-t", "1", "-D", secs, url).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("h2load: %v: %s", err, out)
	}
	rate, done := h2loadRate.FindSubmatch(out), h2loadDone.FindSubmatch(out)
	if rate == nil || done == nil {
		return 0, 0, fmt.Errorf("h2load: unexpected output: %s", out)
	}
	if string(done[2]) != "0" {
		return 0, 0, fmt.Errorf("h2load: %s requests failed: %s", done[2], out)
	}
	n, err := strconv.ParseInt(string(done[1]), 10, 64)
	if err != nil {
		return 0, 0, err
	}
	rps, err := strconv.ParseFloat(string(rate[1]), 64)
	return n, rps, err
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
// grpcConns connections for d, and returns the calls and their rate; a
// failed call fails the run.
func grpcLoad(ctx context.Context, target string, d time.Duration) (int64, float64, error) {
	var clients []healthpb.HealthClient
	for range grpcConns {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, 0, err
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
		return 0, 0, firstErr
	}
	return calls.Load(), float64(calls.Load()) / time.Since(start).Seconds(), nil
}
