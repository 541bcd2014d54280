package gateway

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/storedresp"
	"github.com/warden-ai/warden/gateway/internal/storefailover"
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
		g.adapterStore, _ = given.(tenant.AdapterStore)
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
			g.store, g.adapterStore = s, s
		case config.StoreRedis:
			rdb, err := storefailover.NewClient(&t.Redis)
			if err != nil {
				return fmt.Errorf("gateway: %w", err)
			}
			s, err := redisstore.New(rdb, secret, redisstore.WithPrefix(t.Redis.KeyPrefix),
				redisstore.WithFailOpen(t.FailOpen), redisstore.WithLogger(g.logger))
			if err != nil {
				_ = rdb.Close()
				return fmt.Errorf("gateway: redis tenant store: %w", err)
			}
			g.modelLimits = tenant.NewModelLimitsCache(s, tenant.ModelLimitsCacheConfig{Logger: g.logger})
			g.failover = storefailover.New(s, storefailover.Config{Models: g.modelLimits, Logger: g.logger})
			g.store, g.closeStore, g.adapterStore = g.failover, rdb.Close, s
			responses = storedresp.NewRedis(rdb, t.Redis.KeyPrefix)
		default:
			return fmt.Errorf("gateway: unknown tenants.store %q", t.Store)
		}
	}
	if g.modelLimits == nil {
		g.modelLimits = tenant.NewModelLimitsCache(g.store, tenant.ModelLimitsCacheConfig{Logger: g.logger})
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
