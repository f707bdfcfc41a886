package policies

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// MemberConfig is one entry of a route's upstreams: an instance of the API
// the route serves.
type MemberConfig struct {
	// Name names the member in metrics, logs and explain (its URL may hold
	// a secret and is shown redacted).
	Name string `koanf:"name"`
	// URL is http(s)://host[:port][/path]; every member of a pool has the
	// same path.
	URL string `koanf:"url" redact:"url"`
	// Weight is the member's share of the traffic against the others'
	// (default 1; nil when absent, so that a 0 is an error, not a default).
	Weight *int `koanf:"weight"`
	// Protocol is how the gateway speaks to the member (default auto).
	Protocol UpstreamProtocol `koanf:"protocol"`
}

// HealthConfig is a pool's health: passive (what requests see) and, with
// Check, active (probes).
type HealthConfig struct {
	// Failures is how many connect errors, timeouts or 5xx answers in a
	// row eject a member (default 5).
	Failures int `koanf:"failures"`
	// Ejection is how long a member's first ejection lasts (default 30s);
	// its n-th in a row lasts n times as long, up to MaxEjection.
	Ejection time.Duration `koanf:"ejection"`
	// MaxEjection caps an ejection, and a Retry-After the member sends
	// (default 5m).
	MaxEjection time.Duration `koanf:"max_ejection"`
	// Check probes each member, when present.
	Check *HealthCheckConfig `koanf:"check"`
}

// HealthCheckConfig is a pool's active health check: a GET of Path on each
// member every Interval.
type HealthCheckConfig struct {
	Path     string        `koanf:"path"`     // required: "/healthz"
	Interval time.Duration `koanf:"interval"` // default 10s
	Timeout  time.Duration `koanf:"timeout"`  // default 2s
	// Healthy is how many passed probes in a row bring a member that
	// probes took down back (default 2); Unhealthy how many failed ones
	// in a row take it down (default 3).
	Healthy   int `koanf:"healthy"`
	Unhealthy int `koanf:"unhealthy"`
}

// RetryConfig turns on retries on another member of a pool. An empty block
// ({}) turns them on with every default.
type RetryConfig struct {
	// Attempts is how many members one request may try, the first
	// included (default 2).
	Attempts int `koanf:"attempts"`
	// Statuses are answers retried besides 502 and 503 (the connect
	// errors always are).
	Statuses []int `koanf:"statuses"`
	// IdempotencyKey declares that the members honour an Idempotency-Key
	// header: a request that carries one is retried whatever its method.
	IdempotencyKey bool `koanf:"idempotency_key"`
}

// Balance is how a pool spreads requests over its members.
type Balance string

// The balancing rules.
const (
	BalanceRoundRobin   Balance = "round_robin"   // in turn, by weight
	BalanceLeastRequest Balance = "least_request" // the less busy of two picked at random
	BalanceHash         Balance = "hash"          // by a key: one key, one member
)

// Balances lists every balancing rule.
var Balances = []Balance{BalanceRoundRobin, BalanceLeastRequest, BalanceHash}

// UnmarshalText sets b to the rule named by text, one of Balances; empty
// text leaves the zero value, which defaults to BalanceRoundRobin.
func (b *Balance) UnmarshalText(text []byte) error { return limiter.UnmarshalName(b, Balances, text) }

// MarshalText returns the rule's name.
func (b Balance) MarshalText() ([]byte, error) { return []byte(b), nil }

// Pool defaults.
const (
	DefaultPoolFailures     = 5
	DefaultPoolEjection     = 30 * time.Second
	DefaultPoolMaxEjection  = 5 * time.Minute
	DefaultCheckInterval    = 10 * time.Second
	DefaultCheckTimeout     = 2 * time.Second
	DefaultCheckHealthy     = 2
	DefaultCheckUnhealthy   = 3
	DefaultRetryAttempts    = 2
	MaxPoolMembers          = 64
	MaxRetryAttempts        = 10
	DefaultRetryBudgetShare = 0.2
	DefaultRetryBudgetMin   = 3
)

// Pool is a compiled route's upstreams.
type Pool struct {
	Members []Member
	Balance Balance
	// HashKey is the key of balance: hash, as a policy's (nil otherwise);
	// HashKeySpec as written.
	HashKey     KeyFunc
	HashKeySpec string
	Health      Health
	// Check is the active health check; nil when none.
	Check *HealthCheck
	// Retry is the retry rule; nil when retries are off.
	Retry *Retry
}

// Member is one compiled member of a pool: an upstream with a name of its
// own, the unit that a target with its own key, model and prices can
// extend.
type Member struct {
	Name     string
	URL      *url.URL
	Weight   int
	Protocol UpstreamProtocol
}

// Health is a pool's passive health.
type Health struct {
	Failures    int
	Ejection    time.Duration
	MaxEjection time.Duration
}

// HealthCheck is a pool's active health check.
type HealthCheck struct {
	Path               string
	Interval, Timeout  time.Duration
	Healthy, Unhealthy int
}

// Retry is a pool's retry rule.
type Retry struct {
	Attempts int
	// Statuses are the answers retried: 502, 503 and the configured ones.
	Statuses       []int
	IdempotencyKey bool
}

// Retries reports whether an answer of status may be retried.
func (r *Retry) Retries(status int) bool { return slices.Contains(r.Statuses, status) }

func (rt *RouteConfig) applyPoolDefaults() {
	if len(rt.Upstreams) == 0 {
		return
	}
	setDefault(&rt.Balance, BalanceRoundRobin)
	for i := range rt.Upstreams {
		m := &rt.Upstreams[i]
		if m.Weight == nil {
			m.Weight = new(1)
		}
		setDefault(&m.Protocol, UpstreamAuto)
	}
	if rt.Health == nil {
		rt.Health = &HealthConfig{}
	}
	h := rt.Health
	setDefault(&h.Failures, DefaultPoolFailures)
	setDefault(&h.Ejection, DefaultPoolEjection)
	setDefault(&h.MaxEjection, DefaultPoolMaxEjection)
	if c := h.Check; c != nil {
		setDefault(&c.Interval, DefaultCheckInterval)
		setDefault(&c.Timeout, DefaultCheckTimeout)
		setDefault(&c.Healthy, DefaultCheckHealthy)
		setDefault(&c.Unhealthy, DefaultCheckUnhealthy)
	}
	if r := rt.Retry; r != nil {
		setDefault(&r.Attempts, DefaultRetryAttempts)
	}
}

var memberNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// validatePool checks a route's upstream or upstreams, and what applies to
// a pool only.
func validatePool(p *problems, place string, rt *RouteConfig, builtins map[string]*url.URL) {
	if len(rt.Upstreams) == 0 {
		if _, err := resolveUpstream(rt.Upstream, builtins); err != nil {
			p.add(place+".upstream", err.Error())
		}
		for key, set := range map[string]bool{
			"balance": rt.Balance != "", "hash_key": rt.HashKey != "", "health": rt.Health != nil, "retry": rt.Retry != nil,
		} {
			if set {
				p.addf(place+"."+key, "applies to a pool of upstreams only (set upstreams)")
			}
		}
		return
	}
	if rt.Upstream != "" {
		p.add(place+".upstream", "set upstream or upstreams, not both")
	}
	if len(rt.Upstreams) > MaxPoolMembers {
		p.addf(place+".upstreams", "at most %d members, got %d", MaxPoolMembers, len(rt.Upstreams))
	}
	names := map[string]int{}
	var path string
	for i := range rt.Upstreams {
		m := &rt.Upstreams[i]
		mp := indexPlace(place+".upstreams", i)
		switch first, dup := names[m.Name]; {
		case !memberNameRE.MatchString(m.Name):
			p.addf(mp+".name", "required: letters, digits, _ . - (at most 64), got %q", m.Name)
		case dup:
			p.addf(mp+".name", "duplicate member name %q (also upstreams[%d])", m.Name, first)
		default:
			names[m.Name] = i
		}
		u, err := resolveUpstream(m.URL, builtins)
		if err != nil {
			p.add(mp+".url", err.Error())
		} else if i == 0 {
			path = u.Path
		} else if strings.TrimSuffix(u.Path, "/") != strings.TrimSuffix(path, "/") {
			// A request's path is joined to the member's: a final "/"
			// makes no difference.
			p.addf(mp+".url", "every member of a pool has the same path (upstreams[0]'s is %q), got %q", path, u.Path)
		}
		if m.Weight != nil && *m.Weight <= 0 {
			p.addf(mp+".weight", "must be > 0 (to take a member out, remove it from the list), got %d", *m.Weight)
		}
		if u != nil {
			if err := m.Protocol.Fits(u.Scheme); err != nil {
				p.add(mp+".protocol", err.Error())
			}
		}
	}
	switch {
	case rt.Balance == BalanceHash && rt.HashKey == "":
		p.add(place+".hash_key", "required with balance: hash (a key as policies write it: tenant, header:NAME, ip, ...)")
	case rt.Balance != BalanceHash && rt.HashKey != "":
		p.add(place+".hash_key", "applies to balance: hash only")
	case rt.HashKey != "":
		if _, err := parseKeySpec(rt.HashKey); err != nil {
			p.add(place+".hash_key", err.Error())
		}
	}
	if h := rt.Health; h != nil {
		if h.Failures <= 0 {
			p.addf(place+".health.failures", "must be > 0, got %d", h.Failures)
		}
		if h.Ejection <= 0 {
			p.addf(place+".health.ejection", "must be > 0, got %s", h.Ejection)
		}
		if h.MaxEjection < h.Ejection {
			p.addf(place+".health.max_ejection", "must be at least ejection (%s), got %s", h.Ejection, h.MaxEjection)
		}
		if c := h.Check; c != nil {
			cp := place + ".health.check"
			if len(c.Path) == 0 || c.Path[0] != '/' {
				p.addf(cp+".path", "must start with \"/\", got %q", c.Path)
			}
			if c.Interval <= 0 {
				p.addf(cp+".interval", "must be > 0, got %s", c.Interval)
			}
			if c.Timeout <= 0 || c.Timeout > c.Interval {
				p.addf(cp+".timeout", "must be > 0 and at most interval (%s), got %s", c.Interval, c.Timeout)
			}
			if c.Healthy <= 0 {
				p.addf(cp+".healthy", "must be > 0, got %d", c.Healthy)
			}
			if c.Unhealthy <= 0 {
				p.addf(cp+".unhealthy", "must be > 0, got %d", c.Unhealthy)
			}
		}
	}
	if r := rt.Retry; r != nil {
		if r.Attempts < 1 || r.Attempts > MaxRetryAttempts {
			p.addf(place+".retry.attempts", "must be between 1 and %d, got %d", MaxRetryAttempts, r.Attempts)
		}
		for i, s := range r.Statuses {
			if s < 500 || s > 599 {
				p.addf(indexPlace(place+".retry.statuses", i), "must be a 5xx status (429 is not retried: its Retry-After is the member's), got %d", s)
			}
		}
	}
}

// compilePool compiles a route's upstreams; nil when it has one upstream.
func compilePool(rc *RouteConfig, builtins map[string]*url.URL) (*Pool, error) {
	if len(rc.Upstreams) == 0 {
		return nil, nil
	}
	pool := &Pool{Balance: rc.Balance, HashKeySpec: rc.HashKey}
	for i, m := range rc.Upstreams {
		u, err := resolveUpstream(m.URL, builtins)
		if err != nil {
			return nil, fmt.Errorf("upstreams[%d].url: %w", i, err)
		}
		pool.Members = append(pool.Members, Member{Name: m.Name, URL: u, Weight: *m.Weight, Protocol: m.Protocol})
	}
	if rc.HashKey != "" {
		parts, err := parseKeySpec(rc.HashKey)
		if err != nil {
			return nil, fmt.Errorf("hash_key: %w", err)
		}
		pool.HashKey = keyFunc(parts)
	}
	if h := rc.Health; h != nil {
		pool.Health = Health{Failures: h.Failures, Ejection: h.Ejection, MaxEjection: h.MaxEjection}
		if c := h.Check; c != nil {
			pool.Check = &HealthCheck{Path: c.Path, Interval: c.Interval, Timeout: c.Timeout, Healthy: c.Healthy, Unhealthy: c.Unhealthy}
		}
	}
	if r := rc.Retry; r != nil {
		pool.Retry = &Retry{
			Attempts:       r.Attempts,
			Statuses:       append([]int{http.StatusBadGateway, http.StatusServiceUnavailable}, r.Statuses...),
			IdempotencyKey: r.IdempotencyKey,
		}
	}
	return pool, nil
}
