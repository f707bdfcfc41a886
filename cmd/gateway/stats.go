package main

import (
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
)

// The metrics package reads stats values of its own, so that it imports
// neither the handler's packages nor the Redis backend; these hand it what
// each part counts. Where the types convert whole, a field added on one side
// alone fails to compile here.

func redisStats(rl *redislimit.Limiter) func() metrics.RedisStats {
	return func() metrics.RedisStats {
		s := rl.Stats()
		nodes := make([]metrics.RedisNode, len(s.Nodes))
		for i, n := range s.Nodes {
			nodes[i] = metrics.RedisNode{Addr: n.Addr, Breaker: n.Breaker, BreakerOpens: n.BreakerOpens, Errors: n.Errors, Timeouts: n.Timeouts}
		}
		return metrics.RedisStats{
			RoundTrips: s.RoundTrips, Pipelines: s.Pipelines, Errors: s.Errors, Timeouts: s.Timeouts, FailFast: s.FailFast,
			FailedOpen: s.FailedOpen, FailedClosed: s.FailedClosed, LocalFallbacks: s.LocalFallbacks,
			Overloaded: s.Overloaded, DenialCacheHits: s.DenialCacheHits,
			Refunds: s.Refunds, RefundErrors: s.RefundErrors, ScriptReloads: s.ScriptReloads,
			LeasesLost: s.LeasesLost, RenewErrors: s.RenewErrors, BreakerOpens: s.BreakerOpens,
			BreakerOpen: s.BreakerOpen, DenialCacheKeys: s.DenialCacheKeys, Nodes: nodes,
		}
	}
}

func transportStats(t *h1.Transport) func() metrics.TransportStats {
	return func() metrics.TransportStats { return metrics.TransportStats(t.Stats()) }
}

func poolStats(p *pool.Pools) func() metrics.PoolStats {
	return func() metrics.PoolStats {
		b := p.Budget().Stats()
		out := metrics.PoolStats{RetriesGranted: b.Granted, RetriesRefused: b.Refused}
		for _, m := range p.Stats() {
			out.Members = append(out.Members, metrics.PoolMemberStats{
				Route: m.Route, Member: m.Member, InFlight: m.InFlight, Requests: m.Requests, Errors: m.Errors,
				Ejections: m.Ejections, LatencySeconds: m.Latency.Seconds(), State: string(m.Health),
			})
		}
		return out
	}
}

func clientServerStats(s *h1.Server) func() metrics.ClientServerStats {
	return func() metrics.ClientServerStats { return metrics.ClientServerStats(s.Stats()) }
}

func idempotencyStats(l *idempotency.Local) func() metrics.IdempotencyStats {
	return func() metrics.IdempotencyStats { return metrics.IdempotencyStats(l.Stats()) }
}
