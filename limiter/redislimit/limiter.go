package redislimit

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// Client is the part of a go-redis client that Redis uses: scripts,
// pipelines, the DEL of a key's reset, and the EXISTS and PING that check
// whether Redis answers at all. *redis.Client (standalone or
// Sentinel failover) and *redis.ClusterClient implement it.
type Client interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	Ping(ctx context.Context) *redis.StatusCmd
	Pipeline() redis.Pipeliner
}

// Defaults of Config.
const (
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = 500 * time.Millisecond
	DefaultQueueTimeout    = 250 * time.Millisecond
)

// DefaultMaxInFlight is go-redis's default pool size: 10 connections per CPU.
var DefaultMaxInFlight = 10 * runtime.GOMAXPROCS(0)

// Config tunes Redis. The zero value is usable: every field has a
// default.
type Config struct {
	// Timeout bounds one decision's round trip, NOSCRIPT reload included;
	// zero means redisclient.DefaultTimeout. Past it the checks' failure modes apply.
	Timeout time.Duration
	// BreakerFailures is how many consecutive failed round trips open the
	// circuit breaker; zero means DefaultBreakerFailures.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker answers without Redis
	// before one request probes it; zero means DefaultBreakerCooldown.
	BreakerCooldown time.Duration
	// DenialCacheSize caps the keys remembered as denied; zero means
	// DefaultDenialCacheSize.
	DenialCacheSize int
	// Clock is the gateway clock used for the denial cache and the breaker
	// (limits themselves use Redis time); nil means time.Now.
	Clock func() time.Time
	// Logger receives state changes and throttled errors; nil means
	// slog.Default().
	Logger *slog.Logger
	// MaxInFlight caps the round trips in flight at once; decisions beyond
	// it wait for a slot. Set it to the client's pool size so that no
	// decision ever waits inside go-redis, where the wait would eat into
	// the Redis deadline; zero means DefaultMaxInFlight. With Pipelines,
	// decisions share round trips, and Pipelines × 128 of them (if more)
	// may be waiting for or riding in one.
	MaxInFlight int
	// QueueTimeout bounds the wait for a slot; a decision still waiting then
	// is denied (ReasonOverloaded). Zero means DefaultQueueTimeout.
	QueueTimeout time.Duration
	// Pipelines is how many shared pipelines may be in flight at once: the
	// script calls of concurrent decisions are gathered into them (see
	// coalescer), so under load one round trip serves many decisions, and
	// idle a call goes out alone at once. Under load (pipelines carrying 3
	// calls or more on average) one pipeline flies at a time, and another
	// only while a full batch of 128 waits. Zero means DefaultPipelines;
	// negative turns gathering off (every decision its own round trip).
	Pipelines int
}

// Limiter decides checks on Redis for every gateway instance at once: GCRA,
// sliding-window log and fixed window, all timed by Redis's clock, every
// check of a request decided in one call, all or nothing, with per-policy
// failure modes, a circuit breaker and a denial cache. It implements
// limiter.Backend.
//
// Health is kept per Redis server (node.go): on a Cluster each master has
// its own breaker, timeout classification and pipelines, so one sick
// master sends only its keys to their failure modes.
//
// Create it with New; it starts nothing. Run keeps the nodes' health
// current and follows a Cluster failover between requests. A decision may
// leave one bounded background check per node running (see verify): call
// Close before closing the client. Limiter is safe for concurrent use.
type Limiter struct {
	client  Client
	sources map[string]string // script SHA1 -> source, for the NOSCRIPT fallback

	timeout      time.Duration
	queueTimeout time.Duration
	cooldown     time.Duration
	cluster      bool // checks of one request may live on different nodes
	slots        slots
	clock        func() time.Time
	log          *slog.Logger
	denials      *denialCache

	breakerFailures int
	pipelines       int                  // Config.Pipelines: negative turns gathering off
	cc              *redis.ClusterClient // nil unless a Cluster
	single          *node                // the one node when not a Cluster
	nodes           nodeSet

	memberPrefix string // makes sliding-window members unique across instances
	seq          atomic.Uint64

	stats         redisCounters
	errLog        logThrottle
	suspectWindow time.Duration

	closeMu sync.Mutex // guards closed against wg.Add after Close
	closed  bool
	wg      sync.WaitGroup
}

var _ limiter.Backend = (*Limiter)(nil)

// slotCount is how many decisions may be asking Redis at once. Alone, each
// holds a connection: the pool size. Gathered, they do not, the pipelines
// do: as many may hold a slot as the pipelines in flight carry, so one
// holding a slot is at most one pipeline from being sent (a finishing
// pipeline hands up to maxBatch waiting calls to the next). The pool size
// would cap the batches, and with them throughput.
func slotCount(cfg Config) int {
	n := cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)
	if cfg.Pipelines >= 0 {
		n = max(n, cmp.Or(cfg.Pipelines, DefaultPipelines)*maxBatch)
	}
	return n
}

// New returns a Limiter deciding through client, which must not be nil.
func New(client Client, cfg Config) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("creating redis limiter: nil client")
	}
	if cfg.Timeout < 0 || cfg.BreakerCooldown < 0 || cfg.BreakerFailures < 0 || cfg.DenialCacheSize < 0 ||
		cfg.MaxInFlight < 0 || cfg.QueueTimeout < 0 {
		return nil, errors.New("creating redis limiter: negative setting")
	}
	r := &Limiter{
		client:       client,
		timeout:      cmp.Or(cfg.Timeout, redisclient.DefaultTimeout),
		queueTimeout: cmp.Or(cfg.QueueTimeout, DefaultQueueTimeout),
		// Two unanswered waves of round trips this far apart are not one
		// stall of this process: it would have to last twice the timeout.
		suspectWindow: suspectWindowFactor * cmp.Or(cfg.Timeout, redisclient.DefaultTimeout),
		slots:         newSlots(slotCount(cfg)),
		cooldown:      cmp.Or(cfg.BreakerCooldown, DefaultBreakerCooldown),
		clock:         cfg.Clock,
		log:           cfg.Logger,
		denials:       newDenialCache(cfg.DenialCacheSize, cmp.Or(cfg.Timeout, redisclient.DefaultTimeout)),
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	r.cc, r.cluster = client.(*redis.ClusterClient)
	if r.log == nil {
		r.log = slog.Default()
	}
	r.breakerFailures = cmp.Or(cfg.BreakerFailures, DefaultBreakerFailures)
	r.pipelines = cfg.Pipelines
	if r.pipelines == 0 {
		r.pipelines = DefaultPipelines
	}
	r.nodes = nodeSet{m: map[string]*node{}, make: r.newNode}
	if !r.cluster {
		r.single = r.nodes.get(singleAddr(client), client)
	}

	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("creating redis limiter: %w", err)
	}
	r.memberPrefix = hex.EncodeToString(nonce[:])

	r.sources = map[string]string{}
	scripts := []scriptSource{{decideScript, decideSrc}, {decideManyScript, decideManySrc}, {decideManyNodeScript, decideManyNodeSrc}}
	for _, alg := range algorithms {
		scripts = append(scripts, alg.scripts...)
	}
	for _, s := range scripts {
		r.sources[s.script.Hash()] = s.src
	}
	return r, nil
}

// Close waits for the background check that verify may have started. The
// client stays the caller's to close, after Close. Decisions after Close
// still work; they start no goroutine.
func (r *Limiter) Close() error {
	r.closeMu.Lock()
	r.closed = true
	r.closeMu.Unlock()
	r.wg.Wait()
	return nil
}
