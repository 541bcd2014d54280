package storefailover

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/config"
)

// Client timing. A command against an unreachable node fails within about
// a second (one dial of DialTimeout, one retry), so requests fall back to
// degraded mode instead of waiting.
const (
	// Timeout bounds one dial, read or write.
	Timeout = time.Second
	// ClusterReloadInterval is the longest a cluster client keeps a slot
	// map without asking the cluster again, even when nothing failed.
	ClusterReloadInterval = time.Second
)

// NewClient connects to the Redis tenant store r describes: a Redis
// Cluster (r.Cluster) seeded by every address, a master behind Redis
// Sentinel (r.Sentinel), or one server.
func NewClient(r *config.Redis) (redis.UniversalClient, error) {
	password, err := readSecret("tenants.redis.password_file", r.PasswordFile)
	if err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if r.TLS {
		// The server name is each node's host, set by the dialer (cluster
		// nodes and a promoted replica have names of their own).
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case r.Sentinel.Enabled():
		sentinelPassword, err := readSecret("tenants.redis.sentinel.password_file", r.Sentinel.PasswordFile)
		if err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: r.Sentinel.MasterName, SentinelAddrs: r.Sentinel.Addrs, SentinelPassword: sentinelPassword,
			Username: r.Username, Password: password, DB: r.DB, TLSConfig: tlsCfg,
			DialerRetries: 1, DialTimeout: Timeout, ReadTimeout: Timeout, WriteTimeout: Timeout, PoolTimeout: 2 * Timeout,
			MaxRetries: 1,
		}), nil
	case r.Cluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: r.Seeds(), Username: r.Username, Password: password, TLSConfig: tlsCfg,
			DialerRetries: 1, DialTimeout: Timeout, ReadTimeout: Timeout, WriteTimeout: Timeout, PoolTimeout: 2 * Timeout,
			MaxRetries: 1, ClusterStateReloadInterval: ClusterReloadInterval,
		})
		c.AddHook(reloadOnFailure{c})
		return c, nil
	default:
		return redis.NewClient(&redis.Options{
			Addr: r.Seeds()[0], Username: r.Username, Password: password, DB: r.DB, TLSConfig: tlsCfg,
			DialerRetries: 1, DialTimeout: Timeout, ReadTimeout: Timeout, WriteTimeout: Timeout, PoolTimeout: 2 * Timeout,
		}), nil
	}
}

// readSecret reads a password file; "" reads nothing.
func readSecret(field, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("storefailover: %s: %w", field, err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// reloadOnFailure asks a cluster client for a new slot map whenever a
// command fails for want of a node: go-redis reloads by itself on MOVED,
// ASK and READONLY, but keeps dialling a dead master until its reload
// interval, while Redis may already have promoted a replica.
type reloadOnFailure struct{ c *redis.ClusterClient }

var _ redis.Hook = reloadOnFailure{}

// DialHook implements redis.Hook: a cluster client dials through its
// node clients, whose failures surface in ProcessHook.
func (reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) check(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && nodeFailure(err) {
		h.c.ReloadState(ctx)
	}
}

// nodeFailure reports whether err says the node is gone or the cluster is
// reconfiguring, rather than answering the command: every error that is
// not a server reply, and CLUSTERDOWN, TRYAGAIN, MASTERDOWN and LOADING.
func nodeFailure(err error) bool {
	if errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
