package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// fail wraps a Redis error: connection problems and transient server states
// wrap tenant.ErrUnavailable (and are logged once per outage); a caller's
// cancellation is returned as such.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return fmt.Errorf("redisstore: %s: %w", op, ctx.Err())
	}
	if !unavailable(err) {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	if !s.down.Swap(true) {
		s.log.Error("redis unavailable", "op", op, "err", err)
	}
	return fmt.Errorf("redisstore: %s: %w: %w", op, tenant.ErrUnavailable, err)
}

// ok notes a successful round trip, logging the end of an outage.
func (s *Store) ok() {
	if s.down.Load() && s.down.Swap(false) {
		s.log.Info("redis available again")
	}
	s.flushVoids()
}

// unavailable reports whether err means Redis cannot serve now. Every error
// that is not a server reply is one (go-redis reports network, timeout,
// pool and closed-client failures in many forms); of the server's replies,
// only the transient states are.
func unavailable(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
