package gateway

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/cachekey"
)

// cacheDomains derives each request's prefix-cache domain (DESIGN I3, I8):
// HMAC of a secret only this gateway process holds and the tenant (or, if
// the tenant narrowed it, the API key). Nothing a client sends enters it,
// so no client can choose or widen the set of requests it shares KV
// pages with. The secret is drawn at start-up: a restart or a second
// gateway only shares less, never more.
type cacheDomains struct{ secret []byte }

func newCacheDomains() *cacheDomains {
	secret := make([]byte, 32)
	rand.Read(secret) // never fails (crypto/rand)
	return &cacheDomains{secret: secret}
}

// of returns the hex domain a worker receives (cachekey.MetadataDomain)
// for a request of p under the tenant's mode, or "" for no cache.
func (c *cacheDomains) of(p api.Principal, mode cachekey.Mode) string {
	if c == nil {
		return ""
	}
	d, ok := cachekey.Derive(c.secret, mode, p.Tenant, p.KeyID)
	if !ok {
		return ""
	}
	return hex.EncodeToString(d[:])
}
