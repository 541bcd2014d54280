package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/warden-ai/warden/tenant"
)

// limitKind maps the acquire script's denial codes.
func limitKind(code int64) (tenant.LimitKind, bool) {
	switch code {
	case kindModel:
		return tenant.KindModel, true
	case kindPriority:
		return tenant.KindPriority, true
	case kindTokens:
		return tenant.KindTokens, true
	case kindBudget:
		return tenant.KindBudget, true
	case kindRequests:
		return tenant.KindRequests, true
	case kindConcurrency:
		return tenant.KindConcurrency, true
	}
	return "", false
}

// Acquire implements tenant.Store with one script run.
func (s *Store) Acquire(ctx context.Context, tenantID string, req tenant.AcquireRequest) (*tenant.Lease, error) {
	if err := tenant.ValidateID(tenantID); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	leaseID := rand.Text()
	keys := []string{s.key("t", tenantID), s.key("m", req.Model), s.key("rl", tenantID), s.key("bg", tenantID), s.key("cc", tenantID)}
	r, err := s.sc.acquire.Run(ctx, s.rdb, keys, s.now(), tenantID, req.Model, req.Tokens, req.Priority,
		leaseID, s.leaseTTL.Microseconds(), tenant.ConcurrencyRetryAfter.Milliseconds(), req.MinTokens).Int64Slice()
	if err != nil {
		if mayHaveRun(err) {
			s.voids.add(voidLease{tenantID: tenantID, id: leaseID, held: minHeld(req), acquired: s.wallNow()})
		}
		err = s.fail(ctx, "acquire", err)
		if s.failOpen && errors.Is(err, tenant.ErrUnavailable) {
			return s.degradedLease(tenantID, req), nil
		}
		return nil, err
	}
	s.ok()
	v := func(i int) int64 { // replies of early denials are short
		if i < len(r) {
			return r[i]
		}
		return 0
	}
	ms := func(i int) time.Duration { return time.Duration(v(i)) * time.Millisecond }
	quota := tenant.Quota{
		LimitRequests: v(7), RemainingRequests: v(8), ResetRequests: ms(9),
		LimitTokens: v(10), RemainingTokens: v(11), ResetTokens: ms(12),
	}
	switch v(0) {
	case acqOK:
		return tenant.NewLease(tenant.LeaseInfo{
			ID: leaseID, TenantID: tenantID, Model: req.Recorded(), HeldTokens: v(15), Priority: req.Priority,
			AcquiredAt: time.UnixMicro(v(13)).UTC(), ExpiresAt: time.UnixMicro(v(14)).UTC(), Quota: quota,
		}, s), nil
	case acqNoTenant:
		return nil, fmt.Errorf("tenant %q: %w", tenantID, tenant.ErrNotFound)
	case acqDisabled:
		return nil, fmt.Errorf("tenant %q is disabled: %w", tenantID, tenant.ErrForbidden)
	case acqDenied:
		if kind, ok := limitKind(v(1)); ok {
			return nil, &tenant.LimitError{
				Kind: kind, Limit: v(2), Remaining: v(3), Reset: ms(4), RetryAfter: ms(5),
				Unsatisfiable: v(6) == 1, Quota: quota,
			}
		}
	}
	return nil, fmt.Errorf("redisstore: acquire: unexpected reply %v", r)
}

// degradedLease admits a request without checks while Redis is down. Its
// ID is not the failed acquire's: that one is voided on its own.
func (s *Store) degradedLease(tenantID string, req tenant.AcquireRequest) *tenant.Lease {
	now := s.wallNow()
	s.log.Warn("admitting request without limits: redis unavailable and fail-open set", "tenant", tenantID)
	// Unchecked admission grants no privilege: the request waits at
	// priority 0, whatever it asked for (its max_priority is unknown).
	return tenant.NewLease(tenant.LeaseInfo{
		ID: rand.Text(), TenantID: tenantID, Model: req.Recorded(),
		AcquiredAt: now, ExpiresAt: now.Add(s.leaseTTL), Degraded: true,
	}, s)
}

// ReleaseLease implements tenant.LeaseBackend.
func (s *Store) ReleaseLease(ctx context.Context, info tenant.LeaseInfo, used tenant.Consumed) error {
	if err := s.runRelease(ctx, info, used, ""); err != nil {
		return s.fail(ctx, "release", err)
	}
	s.ok()
	return nil
}

// runRelease runs the release script; void "1" voids the lease instead.
func (s *Store) runRelease(ctx context.Context, info tenant.LeaseInfo, used tenant.Consumed, void string) error {
	keys := []string{s.key("t", info.TenantID), s.key("rl", info.TenantID), s.key("bg", info.TenantID), s.key("cc", info.TenantID)}
	return s.sc.release.Run(ctx, s.rdb, keys, s.now(), info.ID, info.HeldTokens, info.AcquiredAt.UnixMicro(),
		used.PromptTokens, used.CompletionTokens, info.Model, s.key("u", info.TenantID, ""),
		s.usageTTL.Milliseconds(), used.CachedTokens, used.Billed(), void).Err()
}

// RenewLease implements tenant.LeaseBackend.
func (s *Store) RenewLease(ctx context.Context, info tenant.LeaseInfo) (time.Time, error) {
	exp, err := s.sc.renew.Run(ctx, s.rdb, []string{s.key("cc", info.TenantID)}, s.now(), info.ID, s.leaseTTL.Microseconds()).Int64()
	if err != nil {
		return time.Time{}, s.fail(ctx, "renew", err)
	}
	s.ok()
	if exp < 0 {
		return time.Time{}, fmt.Errorf("lease %s: %w", info.ID, tenant.ErrLeaseExpired)
	}
	return time.UnixMicro(exp).UTC(), nil
}
