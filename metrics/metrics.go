// Package metrics is the gateway's Prometheus instrumentation: what the proxy
// decides and forwards, what the limiter's local buckets and Redis backend
// hold and count, and which config is in force. It owns its registry (never
// Prometheus's global one), so two gateways in one process, or in one test,
// never share a series.
//
// It knows nothing about requests: callers hand it names. Every label value
// must be bounded: route and policy names and tenants come from the config,
// model names from request bodies are capped (see LLMCharge), and nothing a
// client chooses freely (an API key, an address, a path) may ever be passed.
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// Outcomes of a request (gateway_requests_total) and of one policy's
// decision (gateway_policy_decisions_total, which has OutcomeDelayed too).
const (
	OutcomeAllowed       = "allowed"        // forwarded: every policy admitted it
	OutcomeLimited       = "limited"        // refused by a policy (429)
	OutcomeShadowLimited = "shadow_limited" // a shadow policy would have refused it; forwarded
	OutcomeFailedOpen    = "failed_open"    // forwarded unchecked: Redis failed, on_redis_error: allow
	OutcomeFailedClosed  = "failed_closed"  // refused: Redis failed, on_redis_error: deny (503)
	OutcomeError         = "error"          // the gateway failed (5xx of its own)
	OutcomeInvalid       = "invalid"        // answered before the limiter: no route, bad path or body
	OutcomeUnauthorized  = "unauthorized"   // admitted by the policies that could judge it, then 401 for a missing or unknown key
	OutcomeDelayed       = "delayed"        // a policy made the request wait, and then admitted it
)

// Backends of a decision (gateway_decision_duration_seconds).
const (
	BackendLocal = "local" // in-process buckets only
	BackendRedis = "redis" // at least one check asked Redis
)

// Buckets of the histograms, in seconds.
var (
	// DecisionBuckets span a local decision (a few µs) to a Redis round trip
	// at its timeout (30 ms by default) and beyond.
	DecisionBuckets = []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}
	// UpstreamBuckets span a fast upstream to a slow LLM call's first bytes.
	UpstreamBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
)

// Metrics holds the gateway's collectors and their registry. Build it once
// per process (in cmd/gateway) and hand it to whatever reports; it outlives
// reloads.
//
// Every method is safe for concurrent use and is a no-op on a nil *Metrics,
// so a gateway without metrics passes nil. The request-path methods
// (Request, Policy, Decision, Upstream, InFlight, LLMCharge) do not allocate
// once a label tuple has been seen.
type Metrics struct {
	registry *prometheus.Registry
	handler  http.Handler

	requests         *prometheus.CounterVec
	policyDecisions  *prometheus.CounterVec
	decisionSeconds  *prometheus.HistogramVec
	upstreamTotal    *prometheus.CounterVec
	upstreamSeconds  *prometheus.HistogramVec
	inFlight         prometheus.Gauge
	reloadsOK        prometheus.Counter
	reloadsFailed    prometheus.Counter
	requestChildren  children[requestKey, prometheus.Counter]
	policyChildren   children[policyKey, prometheus.Counter]
	decisionChildren children[string, prometheus.Observer]
	upstreamChildren children[upstreamKey, prometheus.Counter]
	latencyChildren  children[string, prometheus.Observer]

	llm    *llmCollector
	config *configCollector
	redis  *statsCollector[RedisStats]
	local  *statsCollector[limiter.LocalStats]
	// idem is the in-process idempotency store's (see WatchIdempotency).
	idem *statsCollector[IdempotencyStats]
	// adminAuth counts refused admin credentials.
	adminAuth *prometheus.CounterVec
	// jwtRefused counts refused bearer JWTs by reason.
	jwtRefused *prometheus.CounterVec
	// evicting is each Redis node's maxmemory-policy as read at start.
	evicting *prometheus.GaugeVec
	// transport is the lean upstream transport's (see WatchTransport).
	transport *statsCollector[TransportStats]
	// pools is the upstream pools' members (see WatchPools).
	pools *statsCollector[PoolStats]
	// clients is the lean client server's (see WatchClientServer).
	clients *statsCollector[ClientServerStats]
	// tls is the TLS listener's certificates (see WatchCertificates).
	tls *tlsCollector
}

type requestKey struct{ route, outcome string }

type policyKey struct{ route, policy, outcome string }

type upstreamKey struct{ route, class string }

// New returns Metrics registered on a registry of their own, with the Go
// runtime's and the process's collectors.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total",
			Help: "Requests answered, by route and outcome.",
		}, []string{"route", "outcome"}),
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_policy_decisions_total",
			Help: "Decisions of each policy, by route, policy and outcome.",
		}, []string{"route", "policy", "outcome"}),
		decisionSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_decision_duration_seconds",
			Help:    "Time the limiter took to decide a request, by backend (redis when a shared check was asked).",
			Buckets: DecisionBuckets,
		}, []string{"backend"}),
		upstreamTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_upstream_responses_total",
			Help: "Requests forwarded upstream, by route and response class (error: no response).",
		}, []string{"route", "class"}),
		upstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_upstream_duration_seconds",
			Help:    "Time from forwarding a request to the upstream's response headers, by route; requests without a response are not observed.",
			Buckets: UpstreamBuckets,
		}, []string{"route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_requests_in_flight",
			Help: "Requests being handled now.",
		}),
		llm:    newLLMCollector(),
		config: newConfigCollector(),
		redis:  newRedisCollector(),
		local:  newLocalCollector(),
		idem:   newIdemCollector(),

		evicting:   newEvictingGauge(),
		adminAuth:  newAdminAuthCounter(),
		jwtRefused: newJWTRefusedCounter(),

		transport: newTransportCollector(),
		pools:     newPoolsCollector(),
		clients:   newClientServerCollector(),
		tls:       newTLSCollector(),
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_config_reloads_total",
		Help: "Config reloads, by result; a failed one keeps the last good config.",
	}, []string{"result"})
	// Both results exist from the start, so that increase() sees the first
	// failure.
	m.reloadsOK = reloads.WithLabelValues("success")
	m.reloadsFailed = reloads.WithLabelValues("failure")

	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.policyDecisions, m.decisionSeconds, m.upstreamTotal, m.upstreamSeconds,
		m.inFlight, reloads, m.llm, m.config, m.redis, m.local, m.transport, m.pools, m.clients, m.idem, m.evicting, m.adminAuth, m.jwtRefused, m.tls,
	)
	// Built once: HandlerOpts.Registry and InstrumentMetricHandler register
	// the handler's own metrics, which a second registration would refuse.
	m.handler = promhttp.InstrumentMetricHandler(m.registry, promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{
		Registry:      m.registry,
		ErrorHandling: promhttp.ContinueOnError,
	}))
	return m
}

// Handler serves the registry in the Prometheus exposition formats. On a
// nil *Metrics it answers 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return m.handler
}

// Registry returns the registry the metrics live on, to register more
// collectors or to gather in tests; nil on a nil *Metrics.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.registry
}

// maxChildren bounds the label tuples a children cache keeps. Label values
// come from the config, so real configs stay far below it; past it a tuple
// still counts, through the vector's own lookup, so that a caller passing an
// unbounded value costs time, not a quadratic rebuild of the cache.
const maxChildren = 4096

// children caches the children of a metric vector by label tuple. Reading
// is one atomic load and a map lookup: no lock and no allocation, where
// WithLabelValues hashes the values and takes the vector's lock on every
// call. A new tuple copies the map under mu; tuples are few (route ×
// outcome), so the copies are rare and small. It is safe for concurrent use.
type children[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

// get returns k's child, made by newChild on first use. ok is false when
// newChild fails (a label value that is not UTF-8): nothing is counted then.
func (c *children[K, V]) get(k K, newChild func() (V, error)) (v V, ok bool) {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v, true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	var n int
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v, true
		}
		n = len(*old)
	}
	v, err := newChild()
	if err != nil {
		return v, false
	}
	if n >= maxChildren {
		return v, true
	}
	next := make(map[K]V, n+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[k] = v
	c.m.Store(&next)
	return v, true
}
