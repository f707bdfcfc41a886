package memlimit

import (
	"errors"
	"fmt"
)

// The sources of a Choice.
const (
	FromEnv       = "GOMEMLIMIT"
	FromConfig    = "server.memory_limit_bytes"
	FromContainer = "cgroup"
	FromNone      = "none"
)

// Choice is the runtime soft limit the gateway runs with.
type Choice struct {
	// Bytes is the limit to set; 0 sets none (and FromEnv's is the
	// runtime's already).
	Bytes int64
	// Source is FromEnv, FromConfig, FromContainer or FromNone.
	Source string
	// Container and File are the cgroup's limit and the file it was read
	// from, when Source is FromContainer.
	Container uint64
	File      string
}

// Choose decides the limit: GOMEMLIMIT in the environment (lookup) wins,
// then configured when it is > 0; -1 is none; 0 is the container's limit
// (read below root, "/" but in tests) less its Headroom, or none outside
// a limited cgroup. A cgroup that cannot be read is an error, with the
// choice FromNone.
func Choose(configured int64, lookup func(string) (string, bool), root string) (Choice, error) {
	if _, set := lookup("GOMEMLIMIT"); set {
		return Choice{Source: FromEnv}, nil
	}
	switch {
	case configured > 0:
		return Choice{Bytes: configured, Source: FromConfig}, nil
	case configured < 0:
		return Choice{Source: FromNone}, nil
	}
	limit, file, err := Container(root)
	switch {
	case errors.Is(err, ErrNoLimit):
		return Choice{Source: FromNone}, nil
	case err != nil:
		return Choice{Source: FromNone}, fmt.Errorf("reading the container's memory limit: %w", err)
	}
	return Choice{Bytes: int64(limit - Headroom(limit)), Source: FromContainer, Container: limit, File: file}, nil
}
