package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant/redisstore"
)

// EnvRedisAddr names the environment variable with the address of the
// Redis the benchmarks use by default (the one the tests use too).
const EnvRedisAddr = "WARDEN_TEST_REDIS_ADDR"

// DefaultRedisAddr is used when EnvRedisAddr is not set.
const DefaultRedisAddr = "127.0.0.1:6379"

// redisTimeout bounds every Redis call of the benchmarks, like the
// gateway's own client.
const redisTimeout = time.Second

// newRedisClient returns a client for addr with the gateway's timeouts.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: redisTimeout, ReadTimeout: redisTimeout, WriteTimeout: redisTimeout,
		PoolTimeout: 2 * redisTimeout, DialerRetries: 1, DisableIdentity: true,
	})
}

// RedisAvailable reports whether a Redis answers PING at addr.
func RedisAvailable(ctx context.Context, addr string) error {
	c := newRedisClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: no Redis answers at %s: %w", addr, err)
	}
	return nil
}

// uniquePrefix is a key prefix of its own for one run; the hash tag keeps
// the keys of one run on one Redis Cluster slot, as the store requires.
func uniquePrefix() string {
	return "warden:{bench-" + rand.Text()[:12] + "}:"
}

// deletePrefix deletes every key under prefix (redisstore.DeletePrefix).
func deletePrefix(addr, prefix string) error {
	c := newRedisClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := redisstore.DeletePrefix(ctx, c, prefix); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
