package memstore

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"time"

	"github.com/warden-ai/warden/tenant"
)

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
	held := req.Tokens
	if req.MinTokens > 0 && req.MinTokens < held { // flexible: take what is left
		if tpm > 0 {
			held = min(held, remaining(tk))
		}
		if lim.Budget > 0 {
			held = min(held, lim.Budget-used)
		}
		held = max(held, req.MinTokens)
		cost = float64(held)
	}
	switch {
	case tpm > 0 && cost > tpm:
		return nil, deny(tenant.KindTokens, lim.TokensPerMinute, quota.RemainingTokens, quota.ResetTokens, 0, true)
	case lim.Budget > 0 && held > lim.Budget:
		return nil, deny(tenant.KindBudget, lim.Budget, max(0, lim.Budget-used), untilEnd, 0, true)
	case lim.Budget > 0 && used+held > lim.Budget:
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
	st.budgetPeriod, st.budgetStart, st.budgetUsed = lim.BudgetPeriod, start, used+held
	info := tenant.LeaseInfo{
		ID: rand.Text(), TenantID: tenantID, Model: req.Recorded(), HeldTokens: held,
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
			delta := used.Billed() - info.HeldTokens
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
	u.CachedTokens += used.CachedTokens
	u.BilledTokens += used.Billed()
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
