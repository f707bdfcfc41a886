package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/redislock"
)

// RedisClient is the part of a go-redis client the Redis store uses.
// *redis.Client and *redis.ClusterClient satisfy it; build it with
// ContextTimeoutEnabled (redisclient.New does).
type RedisClient interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
}

// RedisConfig tunes a Redis store. The zero value is usable.
type RedisConfig struct {
	// Timeout bounds each Redis call (redislock.DefaultTimeout when zero).
	Timeout time.Duration
	// Poll is how often Wait looks whether a holder finished (default
	// 50ms): Redis tells no one when a key is released.
	Poll time.Duration
	// MaxRecordBytes bounds one record as stored (JSON, the body in
	// base64); a larger one is stored as a done marker: fingerprint and
	// status, no response (DefaultMaxRecordBytes when zero).
	MaxRecordBytes int
}

// DefaultPoll is RedisConfig.Poll when zero.
const DefaultPoll = 50 * time.Millisecond

// DefaultMaxRecordBytes is RedisConfig.MaxRecordBytes when zero: room for
// the largest max_response_bytes (16 MiB) in base64, and a megabyte of
// headers.
const DefaultMaxRecordBytes = 24 << 20

// Redis keeps idempotency keys in Redis, shared by every gateway instance on
// it: an owner holds a redislock lock (SET NX PX, renewed by its watchdog while
// the request is upstream, with a fencing token), and a record is a JSON
// value beside the lock, in its Cluster slot, written only while the lock
// is still the writer's. It starts nothing of its own; an owner's watchdog
// ends with the owner.
type Redis struct {
	client RedisClient
	cfg    RedisConfig
}

var _ Store = (*Redis)(nil)

// NewRedis returns a store on client.
func NewRedis(client RedisClient, cfg RedisConfig) (*Redis, error) {
	if client == nil {
		return nil, errors.New("creating idempotency store: nil redis client")
	}
	if cfg.Timeout < 0 || cfg.Poll < 0 || cfg.MaxRecordBytes < 0 {
		return nil, fmt.Errorf("creating idempotency store: negative timeout %s, poll %s or max record bytes %d",
			cfg.Timeout, cfg.Poll, cfg.MaxRecordBytes)
	}
	if cfg.MaxRecordBytes == 0 {
		cfg.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = redislock.DefaultTimeout
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	return &Redis{client: client, cfg: cfg}, nil
}

// resource is the lock resource of key; redislock hashes it.
func resource(key string) string { return "idem:" + key }

// recordKey is where key's record lives: beside its lock, in its slot.
func recordKey(key string) string {
	lock, _ := redislock.Keys(resource(key))
	return lock + ":record"
}

// Begin takes key's lock; then a record, if one is there, wins over it.
// The lock comes first so that a first request (the usual case) costs two
// round trips: a record looked for before the lock could be written between
// the look and the lock.
func (s *Redis) Begin(ctx context.Context, key string, t Terms) (Claim, error) {
	locker, err := redislock.New(s.client, redislock.Config{
		Timeout: s.cfg.Timeout,
		// A key's fencing counter lives as long as its records may, and
		// then some: tokens of one key grow for as long as it is in use.
		FenceTTL: 2 * (t.ReplayTTL + t.LockTTL),
	})
	if err != nil {
		return Claim{}, err
	}
	// The owner outlives the request's context: it ends with Complete or
	// Abort, which the proxy always calls.
	lk, err := locker.Acquire(context.WithoutCancel(ctx), resource(key), t.LockTTL)
	switch {
	case errors.Is(err, redislock.ErrNotAcquired):
		rec, err := s.record(ctx, key)
		return Claim{Record: rec}, err // no record: busy
	case err != nil:
		return Claim{}, fmt.Errorf("idempotency: %w", err)
	}
	rec, err := s.record(ctx, key)
	if err != nil || rec != nil {
		_ = lk.Release(context.WithoutCancel(ctx))
		return Claim{Record: rec}, err
	}
	return Claim{Owner: &redisOwner{store: s, lock: lk, key: recordKey(key), replayTTL: t.ReplayTTL}}, nil
}

// record reads key's record, nil when there is none.
func (s *Redis) record(ctx context.Context, key string) (*Record, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	b, err := s.client.Get(ctx, recordKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: reading a record: %w", err)
	}
	rec := new(Record)
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("idempotency: decoding a record: %w", err)
	}
	return rec, nil
}

// Wait sleeps one poll interval: whether the holder finished is for the
// next Begin to find out.
func (s *Redis) Wait(ctx context.Context, _ string) error {
	t := time.NewTimer(s.cfg.Poll)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// storeScript writes a record only while the lock holds the writer's token.
// KEYS[1] lock, KEYS[2] record; ARGV[1] token, ARGV[2] record, ARGV[3] ttl
// in ms. It returns 1 when stored, 0 when the lock is not the writer's.
var storeScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call("SET", KEYS[2], ARGV[2], "PX", ARGV[3])
return 1
`)

type redisOwner struct {
	store     *Redis
	lock      *redislock.Lock
	key       string // the record's
	replayTTL time.Duration
}

func (h *redisOwner) Fence() int64 { return h.lock.Fence() }

func (h *redisOwner) Lost() error {
	if h.lock.Context().Err() == nil {
		return nil
	}
	return context.Cause(h.lock.Context())
}

func (h *redisOwner) Complete(ctx context.Context, rec *Record) error {
	b, err := json.Marshal(rec)
	if err == nil && len(b) > h.store.cfg.MaxRecordBytes {
		b, err = json.Marshal(&Record{Fingerprint: rec.Fingerprint, Status: rec.Status, Partial: true})
	}
	if err != nil {
		_ = h.Abort(ctx)
		return fmt.Errorf("idempotency: encoding a record: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, h.store.cfg.Timeout)
	stored, err := storeScript.Run(callCtx, h.store.client, []string{h.lock.Key(), h.key},
		h.lock.Token(), b, max(h.replayTTL.Milliseconds(), 1)).Int64()
	cancel()
	relErr := h.lock.Release(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("idempotency: storing a record: %w", err)
	case stored == 0:
		return ErrLost
	case relErr != nil && !errors.Is(relErr, redislock.ErrNotHeld):
		return fmt.Errorf("idempotency: %w", relErr)
	}
	return nil
}

func (h *redisOwner) Abort(ctx context.Context) error {
	err := h.lock.Release(ctx)
	if errors.Is(err, redislock.ErrNotHeld) {
		return ErrLost
	}
	return err
}
