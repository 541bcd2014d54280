package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/storedresp"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// openStore opens the tenant store tenants.store names, unless given one.
func (g *Gateway) openStore(given tenant.Store) error {
	t := &g.cfg.Tenants
	var secret []byte // the API-key secret of the file, if one is set
	// Stored responses live beside the tenants: in memory unless the
	// tenants are in Redis.
	var responses storedresp.Backend = storedresp.NewMemory(nil)
	if given != nil {
		g.store = given
	} else {
		if t.KeySecretFile != "" {
			b, err := os.ReadFile(t.KeySecretFile)
			if err != nil {
				return fmt.Errorf("gateway: tenants.key_secret_file: %w", err)
			}
			secret = bytes.TrimSpace(b)
		}
		switch t.Store {
		case config.StoreMemory:
			keySecret := secret
			if keySecret == nil {
				// Keys live only as long as the process: a random secret will do.
				keySecret = make([]byte, 32)
				_, _ = rand.Read(keySecret)
			}
			s, err := memstore.New(keySecret)
			if err != nil {
				return fmt.Errorf("gateway: memory tenant store: %w", err)
			}
			g.store = s
		case config.StoreRedis:
			rdb, err := redisClient(&t.Redis)
			if err != nil {
				return err
			}
			s, err := redisstore.New(rdb, secret, redisstore.WithPrefix(t.Redis.KeyPrefix),
				redisstore.WithFailOpen(t.FailOpen), redisstore.WithLogger(g.logger))
			if err != nil {
				_ = rdb.Close()
				return fmt.Errorf("gateway: redis tenant store: %w", err)
			}
			g.store, g.closeStore = s, rdb.Close
			responses = storedresp.NewRedis(rdb, t.Redis.KeyPrefix)
		default:
			return fmt.Errorf("gateway: unknown tenants.store %q", t.Store)
		}
	}
	var authn tenant.Authenticator = g.store
	if t.AuthCacheTTL > 0 {
		authn = tenant.NewAuthCache(g.store, tenant.AuthCacheConfig{TTL: t.AuthCacheTTL, Grace: t.OutageGrace, Logger: g.logger})
	}
	g.auth = &authenticator{next: authn, tenants: make(map[string]tenantInfo)}
	g.domains = newCacheDomains(g.logger, g.cfg.Gateway.Routing, secret)
	r := g.cfg.Gateway.Responses
	var err error
	g.responses, err = storedresp.New(responses, labelledSecret(secret, "warden stored-response secret v1"),
		storedresp.Options{TTL: r.TTL, MaxTenantBytes: int64(r.MaxTenantBytes)})
	if err != nil {
		return fmt.Errorf("gateway: stored responses: %w", err)
	}
	return nil
}

// redisClient connects to the Redis store, a single server or a Redis
// Cluster: one dial retry and short timeouts, so an outage fails requests
// fast (503) instead of hanging them.
func redisClient(r *config.Redis) (redis.UniversalClient, error) {
	opts := &redis.UniversalOptions{
		Addrs: []string{r.Addr}, Username: r.Username, DB: r.DB, IsClusterMode: r.Cluster,
		DialerRetries: 1, DialTimeout: redisTimeout, ReadTimeout: redisTimeout, WriteTimeout: redisTimeout,
		PoolTimeout: 2 * redisTimeout,
	}
	if r.PasswordFile != "" {
		b, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: tenants.redis.password_file: %w", err)
		}
		opts.Password = string(bytes.TrimSpace(b))
	}
	if r.TLS {
		host, _, err := net.SplitHostPort(r.Addr)
		if err != nil {
			return nil, fmt.Errorf("gateway: tenants.redis.addr: %w", err)
		}
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	return redis.NewUniversalClient(opts), nil
}
