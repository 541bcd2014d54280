package storefailover

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-ai/warden/tenant"
)

// ModelLimits is the gateway's snapshot of per-model limits
// (tenant.ModelLimitsCache), which keeps answering during an outage.
type ModelLimits interface {
	Get(ctx context.Context, model string) (tenant.ModelLimits, bool, error)
}

var _ ModelLimits = (*tenant.ModelLimitsCache)(nil)

// Replicas is implemented by stores that can tell how many gateways share
// them (redisstore): the divisor of each gateway's share of a limit.
type Replicas interface {
	Replicas(ctx context.Context) (int, error)
}

// Config configures a Store; zero fields take the defaults.
type Config struct {
	// Models checks a model's allowed tenants during an outage; nil
	// skips that check.
	Models ModelLimits
	// LeaseTTL is the expiry of a lease admitted locally; default
	// 10 minutes (the stores' default).
	LeaseTTL time.Duration
	// Logger receives one line on entering and one on leaving degraded
	// mode; default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the local buckets; default time.Now.
	Now func() time.Time
}

// Store is a tenant.Store that serves known tenants under local limits
// while the wrapped store is unavailable (see the package doc).
type Store struct {
	tenant.Store
	cfg Config

	mu       sync.Mutex
	degraded bool
	since    time.Time // when degraded mode began
	okSince  time.Time // when the latest call that succeeded began
	gateways int       // live gateways as of the last report, at least 1
	tenants  map[string]*known
}

// known is what the gateway knows of one tenant.
type known struct {
	t      tenant.Tenant // as the store last authenticated it
	quota  tenant.Quota  // as the store last reported it after an admission
	seen   time.Time     // when quota was reported; zero: never
	active int64         // this gateway's leases of the tenant not yet released
	local  *shares       // the local buckets while degraded, made at first use
}

var _ tenant.Store = (*Store)(nil)

// New wraps next.
func New(next tenant.Store, cfg Config) *Store {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{Store: next, cfg: cfg, gateways: 1, tenants: make(map[string]*known)}
}

// Register exports warden_tenant_store_degraded on reg.
func (s *Store) Register(reg prometheus.Registerer) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warden_tenant_store_degraded",
		Help: "1 while the tenant store is unreachable from this gateway, which then admits the keys it verified recently under its share of each tenant's limits, else 0.",
	}, func() float64 {
		if s.Degraded() {
			return 1
		}
		return 0
	}))
}

// Degraded reports whether the store was unavailable at the last call.
func (s *Store) Degraded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.degraded
}

// Gateways returns the number of live gateways the shares divide by.
func (s *Store) Gateways() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gateways
}

// Authenticate implements tenant.Authenticator, remembering the tenant.
func (s *Store) Authenticate(ctx context.Context, presented string) (tenant.Principal, error) {
	start := s.cfg.Now()
	p, err := s.Store.Authenticate(ctx, presented)
	if s.observe(start, err) && err == nil {
		s.mu.Lock()
		k := s.knownLocked(p.Tenant.ID)
		k.t = p.Tenant
		k.t.Limits.AllowedModels = slices.Clone(p.Tenant.Limits.AllowedModels)
		s.mu.Unlock()
	}
	return p, err
}

// ShareInFlight implements tenant.InFlightSharer, and learns the number
// of live gateways after a successful report.
func (s *Store) ShareInFlight(ctx context.Context, r tenant.InFlightReport) (map[string]int64, error) {
	start := s.cfg.Now()
	fleet, err := s.Store.ShareInFlight(ctx, r)
	if !s.observe(start, err) || err != nil {
		return fleet, err
	}
	if rs, ok := s.Store.(Replicas); ok {
		start := s.cfg.Now()
		if n, err := rs.Replicas(ctx); s.observe(start, err) && err == nil {
			s.mu.Lock()
			s.gateways = max(n, 1)
			s.mu.Unlock()
		}
	}
	return fleet, nil
}

// Acquire implements tenant.Store: the store decides while it answers;
// while it is unavailable, this gateway's share of the tenant's limits
// does.
func (s *Store) Acquire(ctx context.Context, tenantID string, req tenant.AcquireRequest) (*tenant.Lease, error) {
	start := s.cfg.Now()
	lease, err := s.Store.Acquire(ctx, tenantID, req)
	if !s.observe(start, err) {
		return s.acquireLocal(ctx, tenantID, req, err)
	}
	if err != nil {
		return nil, err
	}
	info := lease.Info()
	s.mu.Lock()
	k := s.knownLocked(tenantID)
	if !info.Degraded { // fail-open leases carry no quota
		k.quota, k.seen = info.Quota, s.cfg.Now()
	}
	k.active++
	s.mu.Unlock()
	return tenant.NewLease(info, &storeLease{s: s, lease: lease}), nil
}

// observe notes whether a call begun at start found the store answering
// (true) or unavailable, entering or leaving degraded mode. A caller's
// own cancellation says nothing about the store, and neither does a
// failure of a call begun before one that succeeded (it met the outage
// that success ended).
func (s *Store) observe(start time.Time, err error) bool {
	if !errors.Is(err, tenant.ErrUnavailable) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return true // the caller gave up: nothing learned of the store
	}
	down := errors.Is(err, tenant.ErrUnavailable)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !down:
		if start.After(s.okSince) {
			s.okSince = start
		}
		if s.degraded {
			s.degraded = false
			s.dropShares()
			s.cfg.Logger.Info("tenant store available again: degraded mode over, the store's limits apply",
				"degraded_for", s.cfg.Now().Sub(s.since).Round(time.Millisecond))
		}
	case !s.degraded && !start.Before(s.okSince):
		s.degraded, s.since = true, s.cfg.Now()
		s.dropShares()
		s.cfg.Logger.Warn("tenant store unavailable: degraded mode, admitting recently verified keys under this gateway's share of each tenant's limits",
			"gateways", s.gateways, "err", err)
	}
	return !down
}

// dropShares forgets the local buckets: each outage starts from the
// store's last report.
func (s *Store) dropShares() {
	for _, k := range s.tenants {
		k.local = nil
	}
}

func (s *Store) knownLocked(id string) *known {
	k := s.tenants[id]
	if k == nil {
		k = &known{}
		s.tenants[id] = k
	}
	return k
}

// acquireLocal admits a request of a known tenant under this gateway's
// share of its limits; cause is the store's error.
func (s *Store) acquireLocal(ctx context.Context, tenantID string, req tenant.AcquireRequest, cause error) (*tenant.Lease, error) {
	s.mu.Lock()
	k := s.tenants[tenantID]
	known := k != nil && k.t.ID != ""
	var t tenant.Tenant
	if known {
		t = k.t
	}
	s.mu.Unlock()
	if !known {
		return nil, fmt.Errorf("tenant %q not verified before the outage: %w", tenantID, cause)
	}
	if err := checkTenant(ctx, t, req, s.cfg.Models); err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if k.local == nil {
		k.local = newShares(t.Limits, s.gateways, k.quota, k.seen, now)
	}
	held, err := k.local.take(req, k.active, now)
	if err != nil {
		return nil, err
	}
	k.active++
	return tenant.NewLease(tenant.LeaseInfo{
		ID: "local-" + rand.Text(), TenantID: tenantID, Model: req.Model, HeldTokens: held, Priority: req.Priority,
		AcquiredAt: now, ExpiresAt: now.Add(s.cfg.LeaseTTL), Quota: k.local.quota(),
	}, &localLease{s: s}), nil
}

// checkTenant refuses what the store would refuse whatever its counters:
// a disabled tenant, a model it may not use, a priority above its
// maximum.
func checkTenant(ctx context.Context, t tenant.Tenant, req tenant.AcquireRequest, models ModelLimits) error {
	if t.Disabled {
		return fmt.Errorf("tenant %q is disabled: %w", t.ID, tenant.ErrForbidden)
	}
	if len(t.Limits.AllowedModels) > 0 && !slices.Contains(t.Limits.AllowedModels, req.Model) {
		return &tenant.LimitError{Kind: tenant.KindModel}
	}
	if models != nil {
		m, ok, err := models.Get(ctx, req.Model)
		if err != nil {
			return err
		}
		if ok && len(m.AllowedTenants) > 0 && !slices.Contains(m.AllowedTenants, t.ID) {
			return &tenant.LimitError{Kind: tenant.KindModel}
		}
	}
	if req.Priority > t.Limits.MaxPriority {
		return &tenant.LimitError{Kind: tenant.KindPriority, Limit: int64(t.Limits.MaxPriority)}
	}
	return nil
}

// released frees a lease's place in the tenant's count and, when it was
// admitted locally and the store is still unavailable, settles its tokens
// with the local bucket.
func (s *Store) released(info tenant.LeaseInfo, used tenant.Consumed, local bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.tenants[info.TenantID]
	if k == nil {
		return
	}
	k.active = max(k.active-1, 0)
	if local && k.local != nil {
		k.local.settle(info.HeldTokens, used.Billed(), s.cfg.Now())
	}
}

// storeLease is a lease the store admitted, counted in its tenant's
// active leases until released.
type storeLease struct {
	s     *Store
	lease *tenant.Lease
	once  sync.Once
}

// ReleaseLease implements tenant.LeaseBackend.
func (l *storeLease) ReleaseLease(ctx context.Context, info tenant.LeaseInfo, used tenant.Consumed) error {
	l.once.Do(func() { l.s.released(info, used, false) })
	return l.lease.Release(ctx, used)
}

// RenewLease implements tenant.LeaseBackend.
func (l *storeLease) RenewLease(ctx context.Context, _ tenant.LeaseInfo) (time.Time, error) {
	if err := l.lease.Renew(ctx); err != nil {
		return time.Time{}, err
	}
	return l.lease.Info().ExpiresAt, nil
}

// localLease is a lease admitted during an outage. Its release settles
// the local bucket at once, then records the usage in the store and
// charges it to the tenant's token rate and budget: while the store is
// unavailable it fails with tenant.ErrUnavailable, so the gateway's
// release journal retries it until the store is back.
type localLease struct {
	s    *Store
	once sync.Once
}

// ReleaseLease implements tenant.LeaseBackend.
func (l *localLease) ReleaseLease(ctx context.Context, info tenant.LeaseInfo, used tenant.Consumed) error {
	l.once.Do(func() { l.s.released(info, used, true) })
	b, ok := l.s.Store.(tenant.LeaseBackend)
	if !ok {
		return nil
	}
	// The store held nothing for it: charge all it used.
	info.HeldTokens = 0
	start := l.s.cfg.Now()
	err := b.ReleaseLease(ctx, info, used)
	l.s.observe(start, err)
	return err
}

// RenewLease implements tenant.LeaseBackend: a local lease lives on this
// gateway only.
func (l *localLease) RenewLease(context.Context, tenant.LeaseInfo) (time.Time, error) {
	return l.s.cfg.Now().Add(l.s.cfg.LeaseTTL), nil
}
