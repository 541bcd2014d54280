// Package memstore is the in-memory tenant.Store, used by `warden up` and in
// tests. All state lives in one process behind one mutex, so every Acquire
// is trivially atomic; it implements exactly the semantics documented in
// package tenant, which the storetest conformance suite checks against the
// Redis implementation.
package memstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
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
	limiters map[string]*limiter // by tenant ID
	usage    map[tenantDay]map[string]*tenant.Usage
}

var (
	_ tenant.Store        = (*Store)(nil)
	_ tenant.LeaseBackend = (*Store)(nil)
)

type keyRecord struct {
	info   tenant.KeyInfo
	digest []byte
}

type tenantDay struct{ tenant, day string }

// limiter is one tenant's admission state.
type limiter struct {
	requests, tokens bucket
	// budget consumption in the period identified by budgetPeriod/budgetStart
	budgetPeriod tenant.BudgetPeriod
	budgetStart  time.Time
	budgetUsed   int64
	// leases maps lease ID to expiry in Unix microseconds.
	leases map[string]int64
}

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
		limiters: make(map[string]*limiter),
		usage:    make(map[tenantDay]map[string]*tenant.Usage),
	}
	for _, o := range opts {
		o(s)
	}
	if s.leaseTTL <= 0 {
		return nil, fmt.Errorf("%w: lease TTL must be positive, got %v", tenant.ErrInvalid, s.leaseTTL)
	}
	return s, nil
}

// CreateTenant implements tenant.Store.
func (s *Store) CreateTenant(_ context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[t.ID]; ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", t.ID, tenant.ErrExists)
	}
	t.CreatedAt = s.now().UTC()
	s.tenants[t.ID] = t
	return cloneTenant(t), nil
}

// GetTenant implements tenant.Store.
func (s *Store) GetTenant(_ context.Context, id string) (tenant.Tenant, error) {
	if err := tenant.ValidateID(id); err != nil {
		return tenant.Tenant{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tenants[id]
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	return cloneTenant(t), nil
}

// ListTenants implements tenant.Store.
func (s *Store) ListTenants(context.Context) ([]tenant.Tenant, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]tenant.Tenant, 0, len(s.tenants))
	for _, id := range slices.Sorted(maps.Keys(s.tenants)) {
		out = append(out, cloneTenant(s.tenants[id]))
	}
	return out, nil
}

// UpdateTenant implements tenant.Store.
func (s *Store) UpdateTenant(_ context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.tenants[t.ID]
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", t.ID, tenant.ErrNotFound)
	}
	t.CreatedAt = old.CreatedAt
	s.tenants[t.ID] = t
	return cloneTenant(t), nil
}

// DeleteTenant implements tenant.Store.
func (s *Store) DeleteTenant(_ context.Context, id string) error {
	if err := tenant.ValidateID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[id]; !ok {
		return fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	now := s.now().UTC()
	for kid, k := range s.keys {
		if k.info.TenantID == id && k.info.RevokedAt == nil {
			k.info.RevokedAt = &now
			s.keys[kid] = k
		}
	}
	delete(s.tenants, id)
	delete(s.limiters, id)
	return nil
}

// IssueKey implements tenant.Store.
func (s *Store) IssueKey(_ context.Context, tenantID, name string) (string, tenant.KeyInfo, error) {
	if err := tenant.ValidateID(tenantID); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	if err := tenant.ValidateKeyName(name); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[tenantID]; !ok {
		return "", tenant.KeyInfo{}, fmt.Errorf("tenant %q: %w", tenantID, tenant.ErrNotFound)
	}
	for {
		key, id, err := tenant.NewKey()
		if err != nil {
			return "", tenant.KeyInfo{}, err
		}
		if _, taken := s.keys[id]; taken {
			continue // 40-bit ID collision: draw again
		}
		info := tenant.KeyInfo{
			ID: id, TenantID: tenantID, Prefix: tenant.KeyDisplayPrefix(id),
			Name: name, CreatedAt: s.now().UTC(),
		}
		s.keys[id] = keyRecord{info: info, digest: s.hasher.Sum(key)}
		return key, info, nil
	}
}

// ListKeys implements tenant.Store.
func (s *Store) ListKeys(_ context.Context, f tenant.KeyFilter) ([]tenant.KeyInfo, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []tenant.KeyInfo
	for _, k := range s.keys {
		if (f.TenantID == "" || k.info.TenantID == f.TenantID) && strings.HasPrefix(k.info.Prefix, f.Prefix) {
			out = append(out, cloneKeyInfo(k.info))
		}
	}
	slices.SortFunc(out, func(a, b tenant.KeyInfo) int {
		return cmp.Or(strings.Compare(a.TenantID, b.TenantID), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// RevokeKey implements tenant.Store.
func (s *Store) RevokeKey(_ context.Context, keyID string) error {
	if err := tenant.ValidateKeyID(keyID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[keyID]
	if !ok {
		return fmt.Errorf("key %q: %w", keyID, tenant.ErrNotFound)
	}
	if k.info.RevokedAt == nil {
		now := s.now().UTC()
		k.info.RevokedAt = &now
		s.keys[keyID] = k
	}
	return nil
}

// Authenticate implements tenant.Authenticator.
func (s *Store) Authenticate(_ context.Context, presented string) (tenant.Principal, error) {
	id, err := tenant.ParseKey(presented)
	if err != nil {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.keys[id]
	if !ok || !s.hasher.Match(presented, k.digest) || k.info.RevokedAt != nil {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	t, ok := s.tenants[k.info.TenantID]
	if !ok || t.Disabled {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	return tenant.Principal{Tenant: cloneTenant(t), KeyID: id}, nil
}

// SetModelLimits implements tenant.Store.
func (s *Store) SetModelLimits(_ context.Context, m tenant.ModelLimits) error {
	m, err := m.Normalize()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models[m.Model] = m
	return nil
}

// GetModelLimits implements tenant.Store.
func (s *Store) GetModelLimits(_ context.Context, model string) (tenant.ModelLimits, error) {
	if err := tenant.ValidateModelName(model); err != nil {
		return tenant.ModelLimits{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.models[model]
	if !ok {
		return tenant.ModelLimits{}, fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	m.AllowedTenants = slices.Clone(m.AllowedTenants)
	return m, nil
}

// ListModelLimits implements tenant.ModelLimitsSource.
func (s *Store) ListModelLimits(context.Context) ([]tenant.ModelLimits, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]tenant.ModelLimits, 0, len(s.models))
	for _, name := range slices.Sorted(maps.Keys(s.models)) {
		m := s.models[name]
		m.AllowedTenants = slices.Clone(m.AllowedTenants)
		out = append(out, m)
	}
	return out, nil
}

// DeleteModelLimits implements tenant.Store.
func (s *Store) DeleteModelLimits(_ context.Context, model string) error {
	if err := tenant.ValidateModelName(model); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.models[model]; !ok {
		return fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	delete(s.models, model)
	return nil
}

// Acquire implements tenant.Store; see the package doc of tenant for the
// checks, their order and the bucket arithmetic, which the Redis script
// mirrors operation for operation.
func (s *Store) Acquire(_ context.Context, tenantID string, req tenant.AcquireRequest) (*tenant.Lease, error) {
	if err := tenant.ValidateID(tenantID); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tenants[tenantID]
	if !ok {
		return nil, fmt.Errorf("tenant %q: %w", tenantID, tenant.ErrNotFound)
	}
	if t.Disabled {
		return nil, fmt.Errorf("tenant %q is disabled: %w", tenantID, tenant.ErrForbidden)
	}
	lim := t.Limits
	if ml, ok := s.models[req.Model]; !lim.Allows(req.Model) || (ok && !ml.Allows(tenantID)) {
		return nil, &tenant.LimitError{Kind: tenant.KindModel}
	}
	if req.Priority > lim.MaxPriority { // 0, the default, allows priority 0 only
		return nil, &tenant.LimitError{Kind: tenant.KindPriority, Limit: int64(lim.MaxPriority)}
	}

	now := s.now()
	nowUS := now.UnixMicro()
	st := s.limiters[tenantID]
	if st == nil {
		st = &limiter{leases: make(map[string]int64)}
		s.limiters[tenantID] = st
	}
	rpm, tpm, cost := float64(lim.RequestsPerMinute), float64(lim.TokensPerMinute), float64(req.Tokens)
	rq := st.requests.level(nowUS, rpm)
	tk := st.tokens.level(nowUS, tpm)
	quota := tenant.Quota{
		LimitRequests: lim.RequestsPerMinute, LimitTokens: lim.TokensPerMinute,
	}
	setQuota := func(rq, tk float64) {
		if rpm > 0 {
			quota.RemainingRequests, quota.ResetRequests = remaining(rq), ceilMS((rpm-rq)*window/rpm)
		}
		if tpm > 0 {
			quota.RemainingTokens, quota.ResetTokens = remaining(tk), ceilMS((tpm-tk)*window/tpm)
		}
	}
	setQuota(rq, tk)
	deny := func(kind tenant.LimitKind, limit, rem int64, reset, retry time.Duration, unsat bool) error {
		return &tenant.LimitError{Kind: kind, Limit: limit, Remaining: rem, Reset: reset, RetryAfter: retry, Unsatisfiable: unsat, Quota: quota}
	}

	start, end := lim.BudgetPeriod.Window(now)
	used := int64(0)
	if st.budgetPeriod == lim.BudgetPeriod && st.budgetStart.Equal(start) {
		used = st.budgetUsed
	}
	untilEnd := ceilMS(float64(end.UnixMicro() - nowUS))
	switch {
	case tpm > 0 && cost > tpm:
		return nil, deny(tenant.KindTokens, lim.TokensPerMinute, quota.RemainingTokens, quota.ResetTokens, 0, true)
	case lim.Budget > 0 && req.Tokens > lim.Budget:
		return nil, deny(tenant.KindBudget, lim.Budget, max(0, lim.Budget-used), untilEnd, 0, true)
	case lim.Budget > 0 && used+req.Tokens > lim.Budget:
		return nil, deny(tenant.KindBudget, lim.Budget, max(0, lim.Budget-used), untilEnd, untilEnd, false)
	case rpm > 0 && rq < 1:
		return nil, deny(tenant.KindRequests, lim.RequestsPerMinute, quota.RemainingRequests, quota.ResetRequests, ceilMS((1-rq)*window/rpm), false)
	case tpm > 0 && tk < cost:
		return nil, deny(tenant.KindTokens, lim.TokensPerMinute, quota.RemainingTokens, quota.ResetTokens, ceilMS((cost-tk)*window/tpm), false)
	}
	maps.DeleteFunc(st.leases, func(_ string, exp int64) bool { return exp <= nowUS })
	if lim.MaxConcurrent > 0 && int64(len(st.leases)) >= lim.MaxConcurrent {
		return nil, deny(tenant.KindConcurrency, lim.MaxConcurrent, 0, 0, tenant.ConcurrencyRetryAfter, false)
	}

	if rpm > 0 {
		rq--
		st.requests.set(rq, nowUS)
	}
	if tpm > 0 {
		tk -= cost
		st.tokens.set(tk, nowUS)
	}
	setQuota(rq, tk)
	st.budgetPeriod, st.budgetStart, st.budgetUsed = lim.BudgetPeriod, start, used+req.Tokens
	info := tenant.LeaseInfo{
		ID: rand.Text(), TenantID: tenantID, Model: req.Model, HeldTokens: req.Tokens,
		Priority: req.Priority, AcquiredAt: time.UnixMicro(nowUS).UTC(),
		ExpiresAt: time.UnixMicro(nowUS).Add(s.leaseTTL).UTC(), Quota: quota,
	}
	st.leases[info.ID] = info.ExpiresAt.UnixMicro()
	return tenant.NewLease(info, s), nil
}

// ReleaseLease implements tenant.LeaseBackend.
func (s *Store) ReleaseLease(_ context.Context, info tenant.LeaseInfo, used tenant.Consumed) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	nowUS := now.UnixMicro()
	if t, ok := s.tenants[info.TenantID]; ok {
		if st := s.limiters[info.TenantID]; st != nil {
			delete(st.leases, info.ID)
			delta := used.Total() - info.HeldTokens
			if tpm := float64(t.Limits.TokensPerMinute); tpm > 0 && delta != 0 {
				st.tokens.set(min(st.tokens.level(nowUS, tpm)-float64(delta), tpm), nowUS)
			}
			start, _ := t.Limits.BudgetPeriod.Window(info.AcquiredAt)
			if st.budgetPeriod == t.Limits.BudgetPeriod && st.budgetStart.Equal(start) {
				st.budgetUsed = max(0, st.budgetUsed+delta)
			}
		}
	}
	k := tenantDay{info.TenantID, now.UTC().Format(tenant.DayFormat)}
	byModel := s.usage[k]
	if byModel == nil {
		byModel = make(map[string]*tenant.Usage)
		s.usage[k] = byModel
	}
	u := byModel[info.Model]
	if u == nil {
		u = &tenant.Usage{TenantID: k.tenant, Model: info.Model, Day: k.day}
		byModel[info.Model] = u
	}
	u.Requests++
	u.PromptTokens += used.PromptTokens
	u.CompletionTokens += used.CompletionTokens
	return nil
}

// RenewLease implements tenant.LeaseBackend.
func (s *Store) RenewLease(_ context.Context, info tenant.LeaseInfo) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nowUS := s.now().UnixMicro()
	st := s.limiters[info.TenantID]
	if st == nil {
		return time.Time{}, fmt.Errorf("lease %s: %w", info.ID, tenant.ErrLeaseExpired)
	}
	maps.DeleteFunc(st.leases, func(_ string, exp int64) bool { return exp <= nowUS })
	if _, ok := st.leases[info.ID]; !ok {
		return time.Time{}, fmt.Errorf("lease %s: %w", info.ID, tenant.ErrLeaseExpired)
	}
	exp := time.UnixMicro(nowUS).Add(s.leaseTTL).UTC()
	st.leases[info.ID] = exp.UnixMicro()
	return exp, nil
}

// Usage implements tenant.Store.
func (s *Store) Usage(_ context.Context, tenantID string, from, to time.Time) ([]tenant.Usage, error) {
	days, err := tenant.UsageDays(tenantID, from, to)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []tenant.Usage
	for _, day := range days {
		byModel := s.usage[tenantDay{tenantID, day}]
		for _, m := range slices.Sorted(maps.Keys(byModel)) {
			out = append(out, *byModel[m])
		}
	}
	return out, nil
}

// window is the rate-limit period in microseconds.
const window = float64(time.Minute / time.Microsecond)

// bucket is a token bucket refilled continuously at limit per window. An
// unset bucket is full.
type bucket struct {
	lvl float64
	ts  int64 // Unix microseconds of the last update
	ok  bool
}

// level returns the bucket's content at now for the given limit.
func (b bucket) level(now int64, limit float64) float64 {
	if !b.ok {
		return limit
	}
	elapsed := float64(max(0, now-b.ts))
	return min(b.lvl+elapsed*limit/window, limit)
}

func (b *bucket) set(lvl float64, now int64) {
	b.lvl, b.ts, b.ok = lvl, max(b.ts, now), true
}

func remaining(lvl float64) int64 { return int64(max(0, math.Floor(lvl))) }

// ceilMS converts microseconds to a duration rounded up to a millisecond.
func ceilMS(us float64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(us/1000)) * time.Millisecond
}

func cloneTenant(t tenant.Tenant) tenant.Tenant {
	t.Limits.AllowedModels = slices.Clone(t.Limits.AllowedModels)
	return t
}

func cloneKeyInfo(k tenant.KeyInfo) tenant.KeyInfo {
	if k.RevokedAt != nil {
		r := *k.RevokedAt
		k.RevokedAt = &r
	}
	return k
}
