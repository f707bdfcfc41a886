package policies

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

const withRedis = "redis: {addrs: ['127.0.0.1:6379']}\n"

func TestInFlightValidationErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"limit missing", withPolicy("{key: tenant, algorithm: concurrency}"),
			"gateway.yaml: policies.p.limit: required with concurrency: the requests in flight allowed per key, > 0 (got 0)"},
		{"limit negative", withRedis + withPolicy("{key: tenant, algorithm: shared_concurrency, limit: -2}"),
			"gateway.yaml: policies.p.limit: required with shared_concurrency: the requests in flight allowed per key, > 0 (got -2)"},
		{"rate with concurrency", withPolicy("{key: ip, algorithm: concurrency, limit: 4, rate: 10}"),
			"gateway.yaml: policies.p.rate: does not apply to concurrency, which counts requests in flight: set limit"},
		{"per with concurrency", withPolicy("{key: ip, algorithm: concurrency, limit: 4, per: 1m}"),
			"gateway.yaml: policies.p.per: does not apply to concurrency, which counts requests in flight: set limit"},
		{"burst with shared_concurrency", withRedis + withPolicy("{key: ip, algorithm: shared_concurrency, limit: 4, burst: 8}"),
			"gateway.yaml: policies.p.burst: does not apply to shared_concurrency, which counts requests in flight: set limit"},
		{"plans with concurrency", withPolicy("{key: tenant, algorithm: concurrency, limit: 4, plans: {pro: 8}}"),
			"gateway.yaml: policies.p.plans: does not apply to concurrency, which counts requests in flight: set limit"},
		{"lease with concurrency", withPolicy("{key: ip, algorithm: concurrency, limit: 4, lease: 10s}"),
			"gateway.yaml: policies.p.lease: applies to shared_concurrency only: an in-process slot is held until its request ends"},
		{"lease negative", withRedis + withPolicy("{key: ip, algorithm: shared_concurrency, limit: 4, lease: -1s}"),
			"gateway.yaml: policies.p.lease: must be > 0, got -1s"},
		{"lease too short", withRedis + withPolicy("{key: ip, algorithm: shared_concurrency, limit: 4, lease: 1ms}"),
			"gateway.yaml: policies.p.lease: must be at least 30ms (it is renewed every third of it), got 1ms"},
		{"shared without redis", withPolicy("{key: ip, algorithm: shared_concurrency, limit: 4}"),
			"gateway.yaml: policies.p.algorithm: shared_concurrency needs redis (set redis.addrs)"},
		{"token cost", withPolicy("{key: ip, algorithm: concurrency, limit: 4, cost: tokens}"),
			`gateway.yaml: policies.p.cost: a concurrency policy counts one slot per request: cost must be requests, got "tokens"`},
		{"limit on a rate policy", withPolicy("{key: ip, rate: 5, limit: 4}"),
			"gateway.yaml: policies.p.limit: applies to concurrency and shared_concurrency only; a token_bucket counts rate per per"},
		{"lease on a rate policy", withRedis + withPolicy("{key: ip, algorithm: gcra, rate: 5, lease: 1s}"),
			"gateway.yaml: policies.p.lease: applies to shared_concurrency only, not gcra"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, tt.yaml), tt.want)
		})
	}
}

func TestInFlightLimitsCompile(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want limiter.Limit
		alg  limiter.Algorithm
	}{
		{"in-process", withPolicy("{key: tenant, algorithm: concurrency, limit: 4}"),
			limiter.Limit{Rate: 4, Burst: 4, Period: time.Second}, limiter.Concurrency},
		{"shared, default lease", withRedis + withPolicy("{key: tenant, algorithm: shared_concurrency, limit: 4}"),
			limiter.Limit{Rate: 4, Burst: 4, Period: DefaultLease}, limiter.SharedConcurrency},
		{"shared, lease", withRedis + withPolicy("{key: tenant, algorithm: shared_concurrency, limit: 2, lease: 5s}"),
			limiter.Limit{Rate: 2, Burst: 2, Period: 5 * time.Second}, limiter.SharedConcurrency},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.yaml).Policies["p"]
			if p.Limit != tt.want || p.Rule.Algorithm != tt.alg {
				t.Fatalf("got %+v %s, want %+v %s", p.Limit, p.Rule.Algorithm, tt.want, tt.alg)
			}
			if got := p.Limit.Quota(); got != tt.want.Rate {
				t.Fatalf("quota: got %d, want the slots, %d", got, tt.want.Rate)
			}
		})
	}
}
