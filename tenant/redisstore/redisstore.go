// Package redisstore is the Redis tenant.Store, shared by every gateway
// replica. Each admission decision (Acquire), release and lease renewal is
// one Lua script, so limits are exact however many replicas share the
// Redis: the script sees and updates the tenant's whole state at once.
//
// # Keys
//
// All keys start with the configured prefix (default "warden:"); tests use
// a unique prefix each. For Redis Cluster the prefix must contain a hash tag,
// e.g. "warden:{prod}:", because scripts touch several keys at once.
//
//	t:<tenant>        tenant record (JSON)          tenants  set of tenant IDs
//	k:<key id>        key record (hash)             keys     set of key IDs
//	tk:<tenant>       set of the tenant's key IDs
//	m:<model>         model limits (JSON)           models   set of model names
//	rl:<tenant>       request and token buckets (hash; expires when full)
//	bg:<tenant>       budget period and tokens used (hash; expires after the period)
//	cc:<tenant>       leases: sorted set of lease ID by expiry
//	u:<tenant>:<day>  usage of one UTC day (hash r:|p:|c:<model>; kept for the retention)
//	fr                gateway replicas sharing in-flight counts: sorted set of replica by report expiry
//	fl:<replica>      one replica's requests in flight (hash tenant -> count)
//
// # Clock
//
// By default the scripts read the Redis server's TIME, so replicas whose
// clocks disagree still share one limit window. WithClock injects a clock
// instead (tests).
//
// # Outages
//
// Errors reaching Redis wrap tenant.ErrUnavailable; the go-redis client
// reconnects by itself when Redis is back, and scripts are reloaded
// (EVALSHA falls back to EVAL). Acquire fails closed unless WithFailOpen is
// set, in which case it admits the request with a Degraded lease that holds
// nothing; its Release (if Redis is back by then) charges the actual tokens
// and records usage. Authentication during an outage is tenant.AuthCache's
// job.
package redisstore

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// Defaults.
const (
	DefaultPrefix         = "warden:"
	DefaultLeaseTTL       = 10 * time.Minute
	DefaultUsageRetention = 400 * 24 * time.Hour
)

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the key prefix (default DefaultPrefix).
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithClock makes the store use now instead of the Redis server's clock.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithLeaseTTL sets how long a lease holds its concurrency slot unless
// renewed (default DefaultLeaseTTL).
func WithLeaseTTL(d time.Duration) Option { return func(s *Store) { s.leaseTTL = d } }

// WithUsageRetention sets how long daily usage is kept (default
// DefaultUsageRetention).
func WithUsageRetention(d time.Duration) Option { return func(s *Store) { s.usageTTL = d } }

// WithFailOpen makes Acquire admit requests without checks while Redis is
// unavailable, instead of failing with tenant.ErrUnavailable.
func WithFailOpen(open bool) Option { return func(s *Store) { s.failOpen = open } }

// WithLogger sets the logger for outage transitions (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// Store is the Redis tenant.Store. It does not own the client.
type Store struct {
	rdb      redis.UniversalClient
	hasher   *tenant.KeyHasher
	sc       scripts
	prefix   string
	clock    func() time.Time
	leaseTTL time.Duration
	usageTTL time.Duration
	failOpen bool
	log      *slog.Logger
	down     atomic.Bool
	voids    voids
}

var (
	_ tenant.Store        = (*Store)(nil)
	_ tenant.LeaseBackend = (*Store)(nil)
)

// New returns a store on rdb whose API keys are hashed with secret (at least
// tenant.MinServerSecretLen bytes). It does not contact Redis.
func New(rdb redis.UniversalClient, secret []byte, opts ...Option) (*Store, error) {
	h, err := tenant.NewKeyHasher(secret)
	if err != nil {
		return nil, err
	}
	s := &Store{
		rdb: rdb, hasher: h, sc: newScripts(), prefix: DefaultPrefix,
		leaseTTL: DefaultLeaseTTL, usageTTL: DefaultUsageRetention, log: slog.Default(),
	}
	for _, o := range opts {
		o(s)
	}
	switch {
	case rdb == nil:
		return nil, fmt.Errorf("%w: nil Redis client", tenant.ErrInvalid)
	case s.leaseTTL < time.Millisecond:
		return nil, fmt.Errorf("%w: lease TTL must be at least 1ms, got %v", tenant.ErrInvalid, s.leaseTTL)
	case s.usageTTL < 24*time.Hour:
		return nil, fmt.Errorf("%w: usage retention must be at least 24h, got %v", tenant.ErrInvalid, s.usageTTL)
	}
	return s, nil
}

func (s *Store) key(parts ...string) string { return s.prefix + strings.Join(parts, ":") }

// now returns the clock argument of the scripts: "" selects Redis TIME.
func (s *Store) now() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock().UnixMicro(), 10)
}

// wallNow is the time used for fields written by Go (CreatedAt, RevokedAt).
func (s *Store) wallNow() time.Time {
	if s.clock == nil {
		return time.Now().UTC()
	}
	return s.clock().UTC()
}
