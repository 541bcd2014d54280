package tenant

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Auth cache defaults.
const (
	DefaultAuthTTL        = time.Second
	DefaultAuthGrace      = 30 * time.Second
	DefaultAuthMaxEntries = 100_000
)

// AuthCacheConfig configures an AuthCache; zero fields take the defaults.
type AuthCacheConfig struct {
	// TTL is how long a successful authentication is reused without asking
	// the store: the bound on how late a revocation or a disabled tenant
	// takes effect on a replica. Default 1s.
	TTL time.Duration
	// Grace is how long after its last successful check a key is still
	// accepted while the store is unavailable (ErrUnavailable). Default
	// 30s; negative disables serving stale entries.
	Grace time.Duration
	// MaxEntries bounds the cache's size. Default 100000.
	MaxEntries int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives outage transitions; default slog.Default().
	Logger *slog.Logger
}

// AuthCache is an Authenticator in front of a Store. Positive results are
// reused for TTL; failures are never cached. Concurrent lookups of one key
// share a single store call. Entries are keyed by SHA-256 of the presented
// key so no plaintext key stays in memory.
type AuthCache struct {
	next  Authenticator
	cfg   AuthCacheConfig
	group singleflight.Group
	// serving stale entries, logged on each transition
	stale atomic.Bool

	mu      sync.Mutex
	entries map[[sha256.Size]byte]authEntry
}

type authEntry struct {
	p        Principal
	verified time.Time
}

// principal returns a copy that callers may modify.
func (e authEntry) principal() Principal {
	p := e.p
	p.Tenant.Limits.AllowedModels = slices.Clone(p.Tenant.Limits.AllowedModels)
	return p
}

var _ Authenticator = (*AuthCache)(nil)

// NewAuthCache returns a cache in front of next.
func NewAuthCache(next Authenticator, cfg AuthCacheConfig) *AuthCache {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultAuthTTL
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultAuthGrace
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultAuthMaxEntries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &AuthCache{next: next, cfg: cfg, entries: make(map[[sha256.Size]byte]authEntry)}
}

// Authenticate returns the cached principal if it was verified less than TTL
// ago, and otherwise asks the store. When the store fails with
// ErrUnavailable, a key verified less than Grace ago is still accepted.
func (c *AuthCache) Authenticate(ctx context.Context, presented string) (Principal, error) {
	if len(presented) != KeyLen {
		// Not a key: no need to hash or look it up.
		return Principal{}, ErrUnauthenticated
	}
	digest := sha256.Sum256([]byte(presented))
	now := c.cfg.Now()
	c.mu.Lock()
	e, cached := c.entries[digest]
	c.mu.Unlock()
	if cached && now.Sub(e.verified) < c.cfg.TTL {
		return e.principal(), nil
	}

	ch := c.group.DoChan(string(digest[:]), func() (any, error) {
		// The entry ages from when the store was asked, not from when a
		// caller that joined later arrived: a change made to the tenant
		// after the lookup began must show within TTL of that change.
		asked := c.cfg.Now()
		// Shared by concurrent callers, so not cancelled by the first one.
		p, err := c.next.Authenticate(context.WithoutCancel(ctx), presented)
		return authEntry{p: p, verified: asked}, err
	})
	var res singleflight.Result
	select {
	case <-ctx.Done():
		return Principal{}, ctx.Err()
	case res = <-ch:
	}

	switch {
	case res.Err == nil:
		c.stale.Store(false)
		e := res.Val.(authEntry)
		c.put(digest, e)
		return e.principal(), nil
	case errors.Is(res.Err, ErrUnauthenticated):
		c.mu.Lock()
		delete(c.entries, digest)
		c.mu.Unlock()
		return Principal{}, ErrUnauthenticated
	case errors.Is(res.Err, ErrUnavailable) && cached && now.Sub(e.verified) < c.cfg.Grace:
		if !c.stale.Swap(true) {
			c.cfg.Logger.Warn("tenant store unavailable; accepting recently verified API keys",
				"grace", c.cfg.Grace, "err", res.Err)
		}
		return e.principal(), nil
	default:
		return Principal{}, res.Err
	}
}

// put stores an entry. When the cache is full it drops entries past their
// grace period, then arbitrary ones down to 90% of MaxEntries, so the sweep
// is amortized over many insertions.
func (c *AuthCache) put(k [sha256.Size]byte, e authEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.cfg.MaxEntries {
		keep := max(c.cfg.TTL, c.cfg.Grace)
		for dk, de := range c.entries {
			if e.verified.Sub(de.verified) >= keep {
				delete(c.entries, dk)
			}
		}
		for dk := range c.entries {
			if len(c.entries) < c.cfg.MaxEntries*9/10 {
				break
			}
			delete(c.entries, dk)
		}
	}
	c.entries[k] = e
}
