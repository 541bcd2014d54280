package redisstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// deleteBatch is how many keys one DEL removes.
const deleteBatch = 500

// DeletePrefix deletes every key under prefix: it drops the store of a test
// or a benchmark, which each get a prefix (WithPrefix) of their own. It
// lists the keys with SCAN, not KEYS, so it is safe on a live server, and
// deletes them in batches. On a Redis Cluster it scans every master.
func DeletePrefix(ctx context.Context, c redis.UniversalClient, prefix string) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return deletePrefix(ctx, m, prefix)
		})
	}
	return deletePrefix(ctx, c, prefix)
}

// deletePrefix deletes the keys under prefix that one SCAN of c lists.
func deletePrefix(ctx context.Context, c redis.Cmdable, prefix string) error {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("redisstore: listing keys %s*: %w", prefix, err)
	}
	for batch := range slices.Chunk(keys, deleteBatch) {
		if err := c.Del(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("redisstore: deleting keys %s*: %w", prefix, err)
		}
	}
	return nil
}
