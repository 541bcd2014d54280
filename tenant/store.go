package tenant

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Store is the tenant state shared by all gateway replicas. It is declared
// here rather than by its consumer (the gateway) because two
// implementations, memstore and redisstore, are tested together against one
// contract by the storetest conformance suite.
//
// Every method is safe for concurrent use. Errors wrap the sentinels of this
// package; a backend failure wraps ErrUnavailable.
type Store interface {
	Authenticator
	ModelLimitsSource
	AliasStore

	// CreateTenant validates t, applies defaults, sets CreatedAt and a
	// new Incarnation and stores it: ErrInvalid, ErrExists.
	CreateTenant(ctx context.Context, t Tenant) (Tenant, error)
	// GetTenant returns the tenant: ErrNotFound.
	GetTenant(ctx context.Context, id string) (Tenant, error)
	// ListTenants returns all tenants sorted by ID.
	ListTenants(ctx context.Context) ([]Tenant, error)
	// UpdateTenant replaces everything but ID, CreatedAt and Incarnation,
	// effective for the next Acquire on every replica: ErrInvalid,
	// ErrNotFound.
	UpdateTenant(ctx context.Context, t Tenant) (Tenant, error)
	// DeleteTenant removes the tenant and its limiter state and revokes its
	// keys; its usage history is kept: ErrNotFound.
	DeleteTenant(ctx context.Context, id string) error

	// IssueKey creates a key for the tenant and returns its plaintext,
	// which is not stored and cannot be shown again: ErrNotFound.
	IssueKey(ctx context.Context, tenantID, name string) (key string, info KeyInfo, err error)
	// ListKeys returns the keys matching f, revoked ones included, sorted
	// by tenant, creation time and ID.
	ListKeys(ctx context.Context, f KeyFilter) ([]KeyInfo, error)
	// RevokeKey revokes the key; revoking twice keeps the first time:
	// ErrInvalid, ErrNotFound.
	RevokeKey(ctx context.Context, keyID string) error

	// SetModelLimits creates or replaces the limits of one model.
	SetModelLimits(ctx context.Context, m ModelLimits) error
	// GetModelLimits returns the limits of model: ErrNotFound.
	GetModelLimits(ctx context.Context, model string) (ModelLimits, error)
	// DeleteModelLimits removes the limits of model: ErrNotFound.
	DeleteModelLimits(ctx context.Context, model string) error

	// Acquire admits one request or denies it with a *LimitError (see
	// package doc for the checks and their order). On success the lease
	// holds a concurrency slot and req.Tokens of the token rate and budget
	// until Lease.Release. Other errors: ErrNotFound (tenant), ErrForbidden
	// (disabled tenant), ErrInvalid, ErrUnavailable.
	Acquire(ctx context.Context, tenantID string, req AcquireRequest) (*Lease, error)

	// Usage returns the tenant's usage for the UTC days from from's date to
	// to's date inclusive, sorted by day then model. Usage of deleted
	// tenants remains queryable. ErrInvalid when to is before from or the
	// range exceeds MaxUsageDays.
	Usage(ctx context.Context, tenantID string, from, to time.Time) ([]Usage, error)

	InFlightSharer
}

// MaxUsageDays bounds the range of one Store.Usage query.
const MaxUsageDays = 1100

// Authenticator resolves a presented API key to its principal. Both stores
// and AuthCache implement it.
type Authenticator interface {
	// Authenticate parses the key, looks it up by key ID, compares its HMAC
	// in constant time and checks that neither the key is revoked nor the
	// tenant disabled. Every such failure is ErrUnauthenticated.
	Authenticate(ctx context.Context, presented string) (Principal, error)
}

// ModelLimitsSource lists per-model limits; ModelLimitsCache reads through it.
type ModelLimitsSource interface {
	// ListModelLimits returns the limits of all models sorted by model.
	ListModelLimits(ctx context.Context) ([]ModelLimits, error)
}

// Principal is an authenticated caller.
type Principal struct {
	// Tenant is the key's tenant as of authentication.
	Tenant Tenant
	// KeyID identifies the key used.
	KeyID string
}

// KeyFilter selects keys for ListKeys; empty fields match everything.
type KeyFilter struct {
	// TenantID selects one tenant's keys.
	TenantID string
	// Prefix selects keys whose KeyInfo.Prefix starts with it, e.g.
	// "wdn_ab" or a full "wdn_<id>".
	Prefix string
}

// Validate checks the filter's syntax; the error wraps ErrInvalid.
func (f KeyFilter) Validate() error {
	if f.TenantID != "" {
		if err := ValidateID(f.TenantID); err != nil {
			return err
		}
	}
	return validateLabel("prefix", f.Prefix, KeyLen)
}

// AcquireRequest describes the request being admitted.
type AcquireRequest struct {
	// Model is the requested model: the limits checked are the tenant's
	// allowed_models and the model limits of Model.
	Model string
	// UsageModel, when set, is the name the lease and its usage are
	// recorded under instead of Model: a LoRA adapter's request
	// ("base:adapter") is admitted against its base model's limits and
	// billed under its own name.
	UsageModel string
	// Tokens is prompt tokens plus max output tokens: the most the request
	// can consume. It is held against the token rate and the budget until
	// Release reconciles it with the actual count.
	Tokens int64
	// MinTokens, when above 0 and below Tokens, makes the request
	// flexible: the store then holds as many tokens as the token rate and
	// the budget have left, capped at Tokens, provided that is at least
	// MinTokens (LeaseInfo.HeldTokens says how many). Below MinTokens the
	// request is denied exactly as one of MinTokens tokens would be. The
	// gateway uses it for requests without max_tokens: MinTokens is the
	// prompt plus one output token.
	MinTokens int64
	// Priority is the requested priority (>= 0); above the tenant's
	// Limits.MaxPriority it is denied with KindPriority (ErrForbidden).
	Priority int
}

// Validate checks the request's syntax; the error wraps ErrInvalid.
func (r AcquireRequest) Validate() error {
	if err := ValidateModelName(r.Model); err != nil {
		return err
	}
	if r.UsageModel != "" {
		if err := ValidateModelName(r.UsageModel); err != nil {
			return fmt.Errorf("usage model: %w", err)
		}
	}
	if err := validateCount("tokens", r.Tokens); err != nil {
		return err
	}
	if err := validateCount("min tokens", r.MinTokens); err != nil {
		return err
	}
	if r.Priority < 0 {
		return fmt.Errorf("%w: priority must be >= 0, got %d", ErrInvalid, r.Priority)
	}
	return nil
}

// Recorded is the model name the lease and its usage are recorded
// under: UsageModel, else Model.
func (r AcquireRequest) Recorded() string {
	if r.UsageModel != "" {
		return r.UsageModel
	}
	return r.Model
}

// Quota is the state of the requests and tokens rate limits after an
// admission decision, for the x-ratelimit-* response headers. A zero Limit
// means unlimited: the gateway omits that group of headers.
type Quota struct {
	LimitRequests     int64
	RemainingRequests int64
	// ResetRequests is the time until the request bucket is full again.
	ResetRequests   time.Duration
	LimitTokens     int64
	RemainingTokens int64
	// ResetTokens is the time until the token bucket is full again.
	ResetTokens time.Duration
}

// Consumed is what a request actually used, reported at Release.
type Consumed struct {
	PromptTokens     int64
	CompletionTokens int64
	// CachedTokens is the part of PromptTokens served from the prefix
	// cache, billed at CachedRate (the tenant's Tenant.CachedRate; the
	// zero value bills them nothing).
	CachedTokens int64
	CachedRate   float64
}

// Validate checks the counts and the rate; the error wraps ErrInvalid.
func (c Consumed) Validate() error {
	if err := validateCount("prompt_tokens", c.PromptTokens); err != nil {
		return err
	}
	if err := validateCount("completion_tokens", c.CompletionTokens); err != nil {
		return err
	}
	if c.CachedTokens < 0 || c.CachedTokens > c.PromptTokens {
		return fmt.Errorf("%w: cached_tokens must be between 0 and prompt_tokens (%d), got %d", ErrInvalid, c.PromptTokens, c.CachedTokens)
	}
	return validateRate("cached_rate", c.CachedRate)
}

// Total is prompt plus completion tokens.
func (c Consumed) Total() int64 { return c.PromptTokens + c.CompletionTokens }

// Billed is what the request is charged against the tenant's token rate
// and budget: Total with each cached prompt token counted at CachedRate,
// the cached part rounded to the nearest token.
func (c Consumed) Billed() int64 {
	return c.Total() - c.CachedTokens + int64(math.Round(float64(c.CachedTokens)*c.CachedRate))
}

// LeaseInfo describes an admitted request.
type LeaseInfo struct {
	// ID identifies the lease (its concurrency slot).
	ID       string
	TenantID string
	Model    string
	// HeldTokens is what Acquire charged to the token rate and budget.
	HeldTokens int64
	Priority   int
	// AcquiredAt is the store's clock at admission.
	AcquiredAt time.Time
	// ExpiresAt is when the concurrency slot is reclaimed unless renewed.
	ExpiresAt time.Time
	// Quota is the rate-limit state after admission.
	Quota Quota
	// Degraded is true when the store was unavailable and admitted the
	// request without checks because it was configured to fail open.
	Degraded bool
}

// LeaseBackend is implemented by stores to release and renew their leases;
// the gateway uses Lease's methods instead.
type LeaseBackend interface {
	// ReleaseLease frees the slot, reconciles the held tokens with used and
	// records usage. Lease guarantees it is called once per successful
	// release.
	ReleaseLease(ctx context.Context, info LeaseInfo, used Consumed) error
	// RenewLease extends the slot by the store's lease TTL and returns the
	// new expiry, or ErrLeaseExpired once the slot was reclaimed.
	RenewLease(ctx context.Context, info LeaseInfo) (time.Time, error)
}

// Lease is an admitted request's hold on its tenant's limits. Release it
// exactly once when the request ends, whatever the outcome; a lease that is
// never released (crashed gateway) gives its concurrency slot back at
// ExpiresAt, but keeps its held tokens charged. Long requests call Renew
// before ExpiresAt.
type Lease struct {
	backend LeaseBackend

	mu       sync.Mutex
	info     LeaseInfo
	released bool
}

// NewLease is called by Store implementations to wrap an admission.
func NewLease(info LeaseInfo, backend LeaseBackend) *Lease {
	return &Lease{info: info, backend: backend}
}

// Info returns the lease's description, with the current expiry.
func (l *Lease) Info() LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// Release ends the lease: it frees the concurrency slot, refunds or charges
// the difference between the held tokens and used.Billed() to the token rate
// and budget, and records used as usage for the tenant, model and UTC day.
// A second Release returns ErrLeaseReleased; a failed one (ErrUnavailable)
// may be retried.
func (l *Lease) Release(ctx context.Context, used Consumed) error {
	if err := used.Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("lease %s: %w", l.info.ID, ErrLeaseReleased)
	}
	if err := l.backend.ReleaseLease(ctx, l.info, used); err != nil {
		return err
	}
	l.released = true
	return nil
}

// Renew extends the lease's concurrency slot by the store's lease TTL.
// ErrLeaseExpired: the slot was already reclaimed (the request may finish,
// but it no longer counts against the concurrency limit).
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("lease %s: %w", l.info.ID, ErrLeaseReleased)
	}
	exp, err := l.backend.RenewLease(ctx, l.info)
	if err != nil {
		return err
	}
	l.info.ExpiresAt = exp
	return nil
}

// ConcurrencyRetryAfter is the RetryAfter of a concurrency denial: when a
// slot frees up is unknowable, so clients are told to retry soon.
const ConcurrencyRetryAfter = time.Second

// UsageDays validates the arguments of Store.Usage and returns the UTC days
// from from's date to to's date inclusive, formatted as DayFormat.
func UsageDays(tenantID string, from, to time.Time) ([]string, error) {
	if err := ValidateID(tenantID); err != nil {
		return nil, err
	}
	y, m, d := from.UTC().Date()
	first := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	y, m, d = to.UTC().Date()
	last := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	if last.Before(first) {
		return nil, fmt.Errorf("%w: usage range ends (%s) before it starts (%s)", ErrInvalid, last.Format(DayFormat), first.Format(DayFormat))
	}
	if n := int(last.Sub(first).Hours()/24) + 1; n > MaxUsageDays {
		return nil, fmt.Errorf("%w: usage range spans %d days, at most %d allowed", ErrInvalid, n, MaxUsageDays)
	}
	var days []string
	for day := first; !day.After(last); day = day.AddDate(0, 0, 1) {
		days = append(days, day.Format(DayFormat))
	}
	return days, nil
}
