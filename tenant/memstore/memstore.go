// Package memstore is the in-memory tenant.Store, used by `warden up` and in
// tests. All state lives in one process behind one mutex, so every Acquire
// is trivially atomic; it implements exactly the semantics documented in
// package tenant, which the storetest conformance suite checks against the
// Redis implementation.
package memstore

import (
	"fmt"
	"sync"
	"time"

	"github.com/warden-ai/warden/tenant"
)

// DefaultLeaseTTL is how long a lease holds its concurrency slot unless
// renewed.
const DefaultLeaseTTL = 10 * time.Minute

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock (default time.Now); tests inject a fake one so
// rate windows need no sleeping.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithLeaseTTL sets how long a lease holds its concurrency slot unless
// renewed (default DefaultLeaseTTL).
func WithLeaseTTL(d time.Duration) Option { return func(s *Store) { s.leaseTTL = d } }

// Store is the in-memory tenant.Store.
type Store struct {
	hasher   *tenant.KeyHasher
	now      func() time.Time
	leaseTTL time.Duration

	mu       sync.RWMutex
	tenants  map[string]tenant.Tenant
	keys     map[string]keyRecord // by key ID
	models   map[string]tenant.ModelLimits
	aliases  map[string]string   // alias → target
	limiters map[string]*limiter // by tenant ID
	usage    map[tenantDay]map[string]*tenant.Usage
	reports  map[string]inFlightReport // by replica
	adapters map[string]tenant.Adapter // by name
	blobs    map[string]adapterFiles   // by content hash
}

var (
	_ tenant.Store        = (*Store)(nil)
	_ tenant.LeaseBackend = (*Store)(nil)
	_ tenant.AdapterStore = (*Store)(nil)
)

// New returns an empty store whose API keys are hashed with secret (at least
// tenant.MinServerSecretLen bytes).
func New(secret []byte, opts ...Option) (*Store, error) {
	h, err := tenant.NewKeyHasher(secret)
	if err != nil {
		return nil, err
	}
	s := &Store{
		hasher:   h,
		now:      time.Now,
		leaseTTL: DefaultLeaseTTL,
		tenants:  make(map[string]tenant.Tenant),
		keys:     make(map[string]keyRecord),
		models:   make(map[string]tenant.ModelLimits),
		aliases:  make(map[string]string),
		limiters: make(map[string]*limiter),
		usage:    make(map[tenantDay]map[string]*tenant.Usage),
		reports:  make(map[string]inFlightReport),
		adapters: make(map[string]tenant.Adapter),
		blobs:    make(map[string]adapterFiles),
	}
	for _, o := range opts {
		o(s)
	}
	if s.leaseTTL <= 0 {
		return nil, fmt.Errorf("%w: lease TTL must be positive, got %v", tenant.ErrInvalid, s.leaseTTL)
	}
	return s, nil
}
