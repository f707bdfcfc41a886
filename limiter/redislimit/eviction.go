package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// NodePolicy is one Redis node's eviction setting.
type NodePolicy struct {
	Addr string
	// Policy is its maxmemory-policy; MaxMemory its maxmemory in bytes as
	// Redis reports it ("0": no limit).
	Policy, MaxMemory string
}

// Evicts reports whether the node may evict the gateway's keys to make
// room: any policy but noeviction, once maxmemory is set. Every key the
// gateway writes has a TTL but the lock fencing counters without one, so the
// volatile-* policies can evict them as well as allkeys-* can; a limit's
// state evicted is a limit reset, an idempotency record evicted is a
// duplicate let through.
func (n NodePolicy) Evicts() bool { return n.Policy != "noeviction" && n.MaxMemory != "0" }

// Warning is the sentence a start logs for a node that Evicts.
func (n NodePolicy) Warning() string {
	return fmt.Sprintf("redis at %s has maxmemory-policy %s with maxmemory %s: when it fills, it evicts keys, "+
		"and an evicted limit starts again from full and an evicted idempotency record lets a duplicate through; "+
		"set maxmemory-policy noeviction (Redis then refuses writes when full, which each policy's on_redis_error handles)",
		n.Addr, n.Policy, n.MaxMemory)
}

// EvictionPolicies reads maxmemory-policy and maxmemory from every node
// that holds the gateway's keys: the server, or each Cluster master. A
// Redis that refuses CONFIG GET (renamed by a managed service, or an ACL)
// is an error the caller may log and go on.
func EvictionPolicies(ctx context.Context, client redis.UniversalClient) ([]NodePolicy, error) {
	read := func(ctx context.Context, c *redis.Client) (NodePolicy, error) {
		got, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			return NodePolicy{}, fmt.Errorf("reading maxmemory-policy of redis at %s: %w", c.Options().Addr, err)
		}
		n := NodePolicy{Addr: c.Options().Addr, Policy: got["maxmemory-policy"], MaxMemory: got["maxmemory"]}
		if n.Policy == "" || n.MaxMemory == "" {
			return NodePolicy{}, fmt.Errorf("reading maxmemory-policy of redis at %s: CONFIG GET answered %v", n.Addr, got)
		}
		return n, nil
	}
	switch c := client.(type) {
	case *redis.Client:
		n, err := read(ctx, c)
		if err != nil {
			return nil, err
		}
		return []NodePolicy{n}, nil
	case *redis.ClusterClient:
		var (
			mu    sync.Mutex
			nodes []NodePolicy
			errs  []error
		)
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := read(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			nodes = append(nodes, n)
			return nil
		})
		sort.Slice(nodes, func(i, j int) bool { return strings.Compare(nodes[i].Addr, nodes[j].Addr) < 0 })
		return nodes, errors.Join(append(errs, err)...)
	default:
		return nil, fmt.Errorf("reading maxmemory-policy: unsupported client %T", client)
	}
}
