package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// The targets, in the order of the table.
const (
	tUpstream        = "upstream"
	tNginxProxy      = "nginx-proxy"
	tNginxLimitReq   = "nginx-limit_req"
	tNginxDeny       = "nginx-deny"
	tHAProxy         = "haproxy"
	tCaddy           = "caddy"
	tBare            = "bare-httputil"
	tBareDeny        = "bare-429"
	tGatewayNone     = "gateway-nopolicy"
	tGatewayLocal    = "gateway-local"
	tGatewayIETF     = "gateway-local-ietf"
	tGatewayNoHdr    = "gateway-local-noheaders"
	tGatewayStd      = "gateway-local-standard"
	tGatewayStdSrv   = "gateway-local-stdserver"
	tGatewayDenyStd  = "gateway-deny-stdserver"
	tGatewayRedis    = "gateway-redis"
	tGatewayDeny     = "gateway-deny"
	tGatewayDenyRed  = "gateway-deny-redis"
	tGatewayLLM      = "gateway-llm"
	tGatewayNonePost = "gateway-nopolicy-post"
	tGatewayUsers    = "gateway-redis-users"
	tGatewayCluster  = "gateway-redis-cluster"
	tGatewayTraced   = "gateway-local-traced"
	tGatewayTraceAll = "gateway-local-traced-all"
	// The curves: what the work a request meets costs, against gateway-local.
	tGatewayPolicies2  = "gateway-policies-2"
	tGatewayPolicies4  = "gateway-policies-4"
	tGatewayPolicies8  = "gateway-policies-8"
	tGatewayRoutes1000 = "gateway-routes-1000"
	tGatewayAPIKey     = "gateway-apikey"
	tGatewayJWT        = "gateway-jwt"
)

// curveTargets are what -curves runs; the other targets leave them out.
var curveTargets = []string{tUpstream, tGatewayLocal, tGatewayPolicies2, tGatewayPolicies4, tGatewayPolicies8, tGatewayRoutes1000}

// target is one row of the table: what wrk loads, and what to expect.
type target struct {
	name  string
	about string
	url   string
	// script is a wrk Lua script (the LLM target's POST); "" for GET.
	script string
	// method, body and header are the same request for the open-loop
	// generator; "" and nil for a GET.
	method string
	body   []byte
	header http.Header
	// deny marks a flood the target answers with 429s (all but the first).
	deny bool
	// counters, when set, is read before and after each run (Redis targets).
	counters func(context.Context) (counters, error)
	// own are the servers whose CPU time a run of the target is charged
	// (Redis's is in counters).
	own []*proc
}

// spec says how to start a target.
type spec struct {
	name, about string
	start       func(l *lab, ctx context.Context, t *target) error
}

// specs are every target the benchmark knows, in the table's order.
var specs = []spec{
	{tUpstream, "nginx `return 200` alone: the floor every proxy adds to", (*lab).upstreamTarget},
	{tNginxProxy, "nginx proxy_pass, keepalive 64 to the upstream", (*lab).nginxTarget},
	{tNginxLimitReq, "nginx limit_req per IP, burst + nodelay, never reached", (*lab).nginxTarget},
	{tNginxDeny, "nginx limit_req per IP at 1r/m: a flood it denies", (*lab).nginxTarget},
	{tHAProxy, "HAProxy stick-table http_req_rate per IP, never reached", (*lab).haproxyTarget},
	{tCaddy, "Caddy reverse_proxy, defaults", (*lab).caddyTarget},
	{tBare, "bare httputil.ReverseProxy (net/http's pooled transport, BufferPool)", (*lab).bareTarget},
	{tBareDeny, "bare net/http handler answering every request with a 429: Go's flood-path floor", (*lab).bareTarget},
	{tGatewayNone, "gateway, a route with no policy", (*lab).gatewayTarget},
	{tGatewayLocal, "gateway, token_bucket per IP, never reached", (*lab).gatewayTarget},
	{tGatewayIETF, "gateway-local with rate_limit_headers: ietf (2 rate-limit headers, not 5)", (*lab).gatewayTarget},
	{tGatewayNoHdr, "gateway-local with rate_limit_headers: none (the decision alone, no header)", (*lab).gatewayTarget},
	{tGatewayStd, "gateway-local with upstream_transport: standard (net/http's transport, not the lean one)", (*lab).gatewayTarget},
	{tGatewayStdSrv, "gateway-local with client_server: standard (net/http's server, not the lean one)", (*lab).gatewayTarget},
	{tGatewayTraced, "gateway-local with tracing at sample_ratio 0.01, exported over OTLP/HTTP to a sink", (*lab).gatewayTarget},
	{tGatewayTraceAll, "gateway-local with every request traced (sample_ratio 1.0), exported over OTLP/HTTP to a sink", (*lab).gatewayTarget},
	{tGatewayRedis, "gateway, Redis gcra per IP, never reached", (*lab).gatewayTarget},
	{tGatewayDeny, "gateway, token_bucket per IP at 1/min: a flood it denies", (*lab).gatewayTarget},
	{tGatewayDenyRed, "gateway, Redis gcra per IP at 1/min: a flood it denies", (*lab).gatewayTarget},
	{tGatewayDenyStd, "gateway-deny with client_server: standard (net/http's server, not the lean one)", (*lab).gatewayTarget},
	{tGatewayLLM, "gateway, llm: openai to a static chat completion, token policy never reached", (*lab).gatewayTarget},
	{tGatewayNonePost, "gateway-nopolicy sent gateway-llm's call and answer (no llm route): its bytes without its work", (*lab).gatewayTarget},
	{tGatewayUsers, "gateway, Redis gcra per X-User over 1,000 users, never reached", (*lab).gatewayTarget},
	{tGatewayCluster, "gateway-redis-users on a 3-master Redis Cluster", (*lab).gatewayTarget},
	{tGatewayPolicies2, "gateway-local with 2 such policies on the route", (*lab).gatewayTarget},
	{tGatewayPolicies4, "gateway-local with 4 such policies on the route", (*lab).gatewayTarget},
	{tGatewayPolicies8, "gateway-local with 8 such policies on the route", (*lab).gatewayTarget},
	{tGatewayRoutes1000, "gateway-local behind 999 routes that do not match", (*lab).gatewayTarget},
	{tGatewayAPIKey, "gateway, token_bucket per tenant of an API key (X-API-Key), never reached", (*lab).gatewayTarget},
	{tGatewayJWT, "gateway-apikey with the tenant from a bearer JWT", (*lab).gatewayTarget},
	{tNginxTLS, "nginx-proxy terminating TLS", (*lab).nginxTarget},
	{tCaddyTLS, "Caddy reverse_proxy terminating TLS", (*lab).caddyTarget},
	{tGatewayTLS, "gateway-local terminating TLS (server.tls, on net/http's server)", (*lab).gatewayTarget},
}

// The gateway targets' policies (YAML flow style). "Never reached": 10
// million a second per key, where a loopback run reaches tens of thousands.
const (
	pLocal  = "{key: ip, algorithm: token_bucket, rate: 10000000, per: 1s}"
	pDeny   = "{key: ip, algorithm: token_bucket, rate: 1, per: 1m}"
	pUsers  = "{key: 'header:X-User', algorithm: gcra, rate: 10000000, per: 1s}"
	pTenant = "{key: tenant, algorithm: token_bucket, rate: 10000000, per: 1s, on_missing_key: reject}"
)

// gatewayConfigs are what each gateway target's config says; gatewayKind
// adds the addresses.
var gatewayConfigs = map[string]gatewayConfig{
	tGatewayNone:       {},
	tGatewayNonePost:   {},
	tGatewayLocal:      {Policy: pLocal},
	tGatewayIETF:       {Policy: pLocal, Headers: "ietf"},
	tGatewayNoHdr:      {Policy: pLocal, Headers: "none"},
	tGatewayStd:        {Policy: pLocal, Transport: "standard"},
	tGatewayStdSrv:     {Policy: pLocal, ClientServer: "standard"},
	tGatewayDenyStd:    {Policy: pDeny, ClientServer: "standard"},
	tGatewayTraced:     {Policy: pLocal, SampleRatio: 0.01},
	tGatewayTraceAll:   {Policy: pLocal, SampleRatio: 1},
	tGatewayRedis:      {Policy: "{key: ip, algorithm: gcra, rate: 10000000, per: 1s}"},
	tGatewayDeny:       {Policy: pDeny},
	tGatewayDenyRed:    {Policy: "{key: ip, algorithm: gcra, rate: 1, per: 1m}"},
	tGatewayLLM:        {Policy: "{key: ip, cost: tokens, rate: 1000000000, per: 1s}", LLM: true},
	tGatewayUsers:      {Policy: pUsers},
	tGatewayCluster:    {Policy: pUsers},
	tGatewayPolicies2:  {Policy: pLocal, Policies: 2},
	tGatewayPolicies4:  {Policy: pLocal, Policies: 4},
	tGatewayPolicies8:  {Policy: pLocal, Policies: 8},
	tGatewayRoutes1000: {Policy: pLocal, Routes: 999},
	tGatewayAPIKey:     {Policy: pTenant, Tenants: benchAPIKeyTenants},
	tGatewayJWT:        {Policy: pTenant, Tenants: benchJWTTenants},
	tGatewayTLS:        {Policy: pLocal},
}

// lab holds the servers behind the targets. Servers several targets share
// (the upstream, nginx's proxy instance, Redis) start once, when the first
// target that needs them does.
type lab struct {
	ps       *procs
	dir      string
	gateway  string // binaries
	bare     string
	upstream string // host:port of the nginx upstream
	// upstreamProc is the upstream's nginx, once it runs.
	upstreamProc *proc
	// baseGateway is the gateway built from -base, "" for none.
	baseGateway string
	// warnings are base: targets that could not start (an older gateway
	// may refuse a newer config); the run goes on without them.
	warnings []string

	nginx     map[string]string // target → host:port, once nginx's proxy runs
	nginxProc *proc             // the nginx targets' one instance
	redis     string            // host:port, once Redis runs
	cluster   []string          // the masters' host:port, once the Cluster runs
	otlp      *otlpSink         // once a traced gateway runs
	tb        redistest.Main    // owns Redis and the Cluster; makes the TLS certificate
}

// selectSpecs returns the specs named in only (comma-separated; "curves"
// for curveTargets, "tls" for tlsTargets, "lean" for leanTargets), or all
// but the curves.
func selectSpecs(only string) ([]spec, error) {
	switch only {
	case "curves":
		only = strings.Join(curveTargets, ",")
	case "tls":
		only = strings.Join(tlsTargets, ",")
	case "lean":
		only = strings.Join(leanTargets, ",")
	}
	if only == "" {
		return slices.DeleteFunc(slices.Clone(specs), func(s spec) bool {
			return s.name != tUpstream && s.name != tGatewayLocal && slices.Contains(curveTargets, s.name)
		}), nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []spec
	for _, s := range specs {
		if want[s.name] {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("-only: unknown target %q", n)
	}
	return out, nil
}

// startTargets starts the upstream, then each selected target's servers,
// and waits until each answers.
func (l *lab) startTargets(ctx context.Context, sel []spec) ([]*target, error) {
	if err := l.startUpstream(ctx); err != nil {
		return nil, err
	}
	var out []*target
	for _, s := range sel {
		t := &target{name: s.name, about: s.about}
		if err := s.start(l, ctx, t); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		out = append(out, t)
	}
	if l.baseGateway == "" {
		return out, nil
	}
	for _, s := range sel {
		if !strings.HasPrefix(s.name, "gateway-") {
			continue
		}
		t := &target{name: basePrefix + s.name, about: "the base revision's " + s.name}
		if err := l.gatewayTarget(ctx, t); err != nil {
			l.warnings = append(l.warnings, fmt.Sprintf("%s not measured: %v", t.name, err))
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func (l *lab) startUpstream(ctx context.Context) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	l.upstream = addr(ports[0])
	dir := filepath.Join(l.dir, "nginx-upstream")
	if err := render("nginx-upstream.conf", filepath.Join(dir, "nginx.conf"), map[string]string{"Dir": dir, "Listen": l.upstream, "Completion": llmCompletion}); err != nil {
		return err
	}
	p, err := l.ps.start("nginx-upstream", dir, nil, "nginx", "-p", dir, "-e", "stderr", "-c", "nginx.conf", "-g", "daemon off;")
	if err != nil {
		return err
	}
	l.upstreamProc = p
	return p.waitHTTP(ctx, "http://"+l.upstream+"/")
}

func (l *lab) upstreamTarget(_ context.Context, t *target) error {
	t.url = "http://" + l.upstream + "/"
	t.own = []*proc{l.upstreamProc}
	return nil
}

// nginxTarget serves the four nginx targets from one nginx instance (2
// workers), one server block each.
func (l *lab) nginxTarget(ctx context.Context, t *target) error {
	if l.nginx == nil {
		ports, err := freePorts(4)
		if err != nil {
			return err
		}
		_, cert, key, err := l.scheme(tNginxTLS)
		if err != nil {
			return err
		}
		l.nginx = map[string]string{tNginxProxy: addr(ports[0]), tNginxLimitReq: addr(ports[1]), tNginxDeny: addr(ports[2]), tNginxTLS: addr(ports[3])}
		dir := filepath.Join(l.dir, "nginx-proxy")
		data := map[string]string{"Dir": dir, "Upstream": l.upstream, "Proxy": l.nginx[tNginxProxy], "LimitReq": l.nginx[tNginxLimitReq],
			"Deny": l.nginx[tNginxDeny], "TLS": l.nginx[tNginxTLS], "Cert": cert, "Key": key}
		if err := render("nginx-proxy.conf", filepath.Join(dir, "nginx.conf"), data); err != nil {
			return err
		}
		p, err := l.ps.start("nginx-proxy", dir, nil, "nginx", "-p", dir, "-e", "stderr", "-c", "nginx.conf", "-g", "daemon off;")
		if err != nil {
			return err
		}
		l.nginxProc = p
		// The proxy block only: a GET of the deny block would take its
		// one request a minute, which is harmless but not needed.
		if err := p.waitHTTP(ctx, "http://"+l.nginx[tNginxProxy]+"/"); err != nil {
			return err
		}
	}
	scheme, _, _, err := l.scheme(t.name)
	if err != nil {
		return err
	}
	t.url = scheme + "://" + l.nginx[t.name] + "/"
	t.deny = t.name == tNginxDeny
	t.own = []*proc{l.nginxProc}
	return nil
}

func (l *lab) haproxyTarget(ctx context.Context, t *target) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	dir := filepath.Join(l.dir, "haproxy")
	if err := render("haproxy.cfg", filepath.Join(dir, "haproxy.cfg"), map[string]string{"Listen": addr(ports[0]), "Upstream": l.upstream}); err != nil {
		return err
	}
	p, err := l.ps.start("haproxy", dir, nil, "haproxy", "-db", "-f", "haproxy.cfg")
	if err != nil {
		return err
	}
	t.own = []*proc{p}
	t.url = "http://" + addr(ports[0]) + "/"
	return p.waitHTTP(ctx, t.url)
}

func (l *lab) caddyTarget(ctx context.Context, t *target) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	scheme, cert, key, err := l.scheme(t.name)
	if err != nil {
		return err
	}
	dir := filepath.Join(l.dir, t.name)
	if err := render("Caddyfile", filepath.Join(dir, "Caddyfile"), map[string]any{"Port": ports[0], "Upstream": l.upstream, "Cert": cert, "Key": key}); err != nil {
		return err
	}
	// Caddy keeps state under $HOME / XDG dirs: keep it in the temp dir.
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
	p, err := l.ps.start(t.name, dir, env, "caddy", "run", "--config", "Caddyfile", "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	t.own = []*proc{p}
	t.url = scheme + "://" + addr(ports[0]) + "/"
	return p.waitHTTP(ctx, t.url)
}

func (l *lab) bareTarget(ctx context.Context, t *target) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	argv := []string{l.bare, "-listen", addr(ports[0]), "-upstream", "http://" + l.upstream}
	if t.name == tBareDeny {
		argv = []string{l.bare, "-listen", addr(ports[0]), "-deny"}
	}
	p, err := l.ps.start(t.name, l.dir, nil, argv...)
	if err != nil {
		return err
	}
	t.own = []*proc{p}
	t.url = "http://" + addr(ports[0]) + "/"
	if t.name == tBareDeny {
		t.deny = true
		return p.waitTCP(ctx, addr(ports[0]))
	}
	return p.waitHTTP(ctx, t.url)
}

// gatewayTarget starts one gateway process for t, alone with its config;
// a base: target runs the base revision's gateway with the config of the
// target it is named after.
func (l *lab) gatewayTarget(ctx context.Context, t *target) error {
	kind, base := strings.CutPrefix(t.name, basePrefix)
	bin, name := l.gateway, t.name
	if base {
		bin, name = l.baseGateway, "base-"+kind
	}
	tt := *t
	tt.name = kind
	if err := l.gatewayKind(ctx, &tt, bin, name); err != nil {
		return err
	}
	tt.name, tt.about = t.name, t.about
	*t = tt
	return nil
}

// gatewayKind starts bin for a target of kind t.name, its config, log and
// policy named name.
func (l *lab) gatewayKind(ctx context.Context, t *target, bin, name string) error {
	redis := t.name == tGatewayRedis || t.name == tGatewayDenyRed || t.name == tGatewayUsers
	if redis && l.redis == "" {
		if err := l.startRedis(); err != nil {
			return err
		}
	}
	redisAddrs := []string{l.redis}
	if t.name == tGatewayCluster {
		if l.cluster == nil {
			if err := l.startCluster(); err != nil {
				return err
			}
		}
		redis, redisAddrs = true, l.cluster
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	cfg := gatewayConfigs[t.name]
	cfg.Name, cfg.About, cfg.Listen, cfg.Upstream = name, t.about, addr(ports[0]), "http://"+l.upstream
	cfg.Policies = max(cfg.Policies, 1)
	if cfg.SampleRatio > 0 {
		if l.otlp == nil {
			if l.otlp, err = startOTLPSink(); err != nil {
				return err
			}
		}
		cfg.Tracing = l.otlp.url
	}
	if redis {
		// The admin listener serves /metrics, read around each run.
		cfg.Admin, cfg.Redis = addr(ports[1]), strings.Join(redisAddrs, ", ")
	}
	if err := l.credentials(t); err != nil {
		return err
	}
	scheme, cert, key, err := l.scheme(t.name)
	if err != nil {
		return err
	}
	cfg.Cert, cfg.Key = cert, key
	path := filepath.Join(l.dir, name+".yaml")
	if err := render("gateway.yaml", path, cfg); err != nil {
		return err
	}
	p, err := l.ps.start(name, l.dir, nil, bin, "serve", "-config", path)
	if err != nil {
		return err
	}
	t.own = []*proc{p}
	t.url = scheme + "://" + cfg.Listen + "/"
	t.deny = t.name == tGatewayDeny || t.name == tGatewayDenyRed || t.name == tGatewayDenyStd
	if cfg.LLM || t.name == tGatewayNonePost {
		t.url = "http://" + cfg.Listen + "/v1/chat/completions"
		t.script = filepath.Join(l.dir, "llm.lua")
		if err := render("llm.lua", t.script, map[string]string{"Body": llmBody}); err != nil {
			return err
		}
		t.method, t.body, t.header = http.MethodPost, []byte(llmBody), http.Header{"Content-Type": {"application/json"}}
	}
	if t.name == tGatewayUsers || t.name == tGatewayCluster {
		t.script = filepath.Join(l.dir, "users.lua")
		if err := render("users.lua", t.script, nil); err != nil {
			return err
		}
	}
	if redis {
		metrics := "http://" + cfg.Admin + "/metrics"
		t.counters = func(ctx context.Context) (counters, error) { return readCounters(ctx, metrics, redisAddrs) }
	}
	// A TCP connect, not a GET: a deny target's GET would be its one
	// admitted request, and an LLM route answers GET / with 404 anyway.
	if err := p.waitTCP(ctx, cfg.Listen); err != nil {
		return err
	}
	if cfg.Admin != "" {
		return p.waitTCP(ctx, cfg.Admin)
	}
	return nil
}

// startRedis starts a redis-server, and startCluster a 3-master Cluster,
// with redistest, as the tests do; lab.close stops them.
func (l *lab) startRedis() error {
	return l.withTB(func() { l.redis = redistest.Start(&l.tb).Addr() })
}

func (l *lab) startCluster() error {
	return l.withTB(func() { l.cluster = redistest.StartCluster(&l.tb).Addrs() })
}

// withTB runs f, whose failure l.tb (a redistest.Main) reports by
// panicking, and returns that failure.
func (l *lab) withTB(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}
