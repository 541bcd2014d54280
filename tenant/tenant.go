package tenant

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/warden-ai/warden/internal/cachekey"
)

// MaxLimitValue is the largest value any limit, budget or token count may
// take. It keeps every counter exactly representable as a float64, which the
// Redis implementation's Lua scripts use for arithmetic.
const MaxLimitValue int64 = 1_000_000_000_000_000

// MaxWeight is the largest fair-scheduling weight a tenant may have.
const MaxWeight = 1_000_000

// MaxRequestPriority is the highest priority a request may ask for, and so
// the largest useful Limits.MaxPriority (the public API's ceiling too).
const MaxRequestPriority = 1000

const (
	maxNameLen  = 256
	maxModelLen = 256
)

// idPattern is the tenant ID syntax: lowercase, starts with a letter or
// digit, at most 63 characters, safe inside Redis keys, URLs and log lines.
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Tenant is one customer account: its identity, scheduling weight and
// limits.
type Tenant struct {
	// ID is the immutable identifier, matching [a-z0-9][a-z0-9_-]{0,62}.
	ID string `json:"id"`
	// Name is a free-form display name.
	Name string `json:"name,omitempty"`
	// Weight is the fair-scheduling weight; 0 on input means the default, 1.
	Weight int `json:"weight"`
	// Limits are the admission limits enforced by Store.Acquire.
	Limits Limits `json:"limits"`
	// CreatedAt is set by the store when the tenant is created.
	CreatedAt time.Time `json:"created_at"`
	// Incarnation is an immutable random value the store creates with
	// the record (NewIncarnation) and keeps across updates: a tenant
	// deleted and re-created under the same ID, or re-created from an
	// exported copy, gets a new one. The prefix cache salts its domains
	// with it (DESIGN I8), so a new incarnation never meets the pages of
	// an old one. Like CreatedAt it is ignored on input.
	Incarnation string `json:"incarnation,omitempty"`
	// Disabled tenants fail authentication and admission.
	Disabled bool `json:"disabled,omitempty"`
	// PrefixCache scopes the tenant's prefix cache (DESIGN I3, I8): ""
	// or "tenant" (the tenant's requests share cached prompt pages),
	// "key" (only requests made with the same API key do), "off" (no
	// sharing). The gateway derives the domain; no request field can
	// widen it.
	PrefixCache cachekey.Mode `json:"prefix_cache,omitempty"`
	// CachedTokenRate is what one prompt token served from the prefix
	// cache (usage cached_tokens) is billed, as a fraction of an uncached
	// one, in [0, 1]; nil means 1 (billed like any prompt token). It
	// applies to budgets, token rates and Usage.BilledTokens.
	CachedTokenRate *float64 `json:"cached_token_rate,omitempty"`
}

// NewIncarnation returns a fresh Tenant.Incarnation: 16 bytes from
// crypto/rand in hex.
func NewIncarnation() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// CachedRate is the tenant's CachedTokenRate, 1 when unset.
func (t Tenant) CachedRate() float64 {
	if t.CachedTokenRate == nil {
		return 1
	}
	return *t.CachedTokenRate
}

// validateRate checks a cached-token rate: a number in [0, 1].
func validateRate(field string, r float64) error {
	if !(r >= 0 && r <= 1) { // false for NaN too
		return fmt.Errorf("%w: %s must be between 0 and 1, got %v", ErrInvalid, field, r)
	}
	return nil
}

// Limits are a tenant's admission limits. Every numeric limit but
// MaxPriority uses 0 for "unlimited"; negative values are invalid.
type Limits struct {
	// RequestsPerMinute is the request rate (token bucket, see package doc).
	RequestsPerMinute int64 `json:"requests_per_minute,omitempty"`
	// TokensPerMinute is the token rate: prompt plus completion tokens.
	TokensPerMinute int64 `json:"tokens_per_minute,omitempty"`
	// MaxConcurrent is the number of requests that may hold a lease at once.
	MaxConcurrent int64 `json:"max_concurrent,omitempty"`
	// Budget is the number of tokens the tenant may use per BudgetPeriod.
	Budget int64 `json:"budget,omitempty"`
	// BudgetPeriod is the budget's calendar period; empty means PeriodMonth.
	BudgetPeriod BudgetPeriod `json:"budget_period,omitempty"`
	// AllowedModels lists the models the tenant may use; empty means all.
	AllowedModels []string `json:"allowed_models,omitempty"`
	// MaxPriority is the highest request priority the tenant may ask for,
	// 0 to MaxRequestPriority. Unlike the other limits, 0 (the default) is
	// not "unlimited": it means priority 0 only, so a tenant jumps the wait
	// queue only if an operator allowed it. A request above it is denied
	// (KindPriority, ErrForbidden).
	MaxPriority int `json:"max_priority"`
	// MaxAdapters is how many LoRA adapters the tenant may register
	// itself through the public API (POST /v1/adapters), counting all it
	// owns; 0 (the default) lets it register none: the platform team
	// registers adapters for it through the admin API.
	MaxAdapters int64 `json:"max_adapters,omitempty"`
}

// ModelLimits are per-model limits set by the platform team. The gateway's
// admission enforces MaxContext and MaxOutputTokens (a request that can never
// fit is a 400, not a limit denial); Store.Acquire enforces AllowedTenants.
type ModelLimits struct {
	// Model is the served model name.
	Model string `json:"model"`
	// MaxContext is a ceiling on prompt plus output tokens; 0 means no
	// ceiling beyond the model's effective context.
	MaxContext int64 `json:"max_context,omitempty"`
	// MaxOutputTokens caps max_tokens; 0 means no cap.
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	// AllowedTenants lists the tenants that may use the model; empty means all.
	AllowedTenants []string `json:"allowed_tenants,omitempty"`
}

// KeyInfo describes an issued API key. The secret itself is never stored or
// returned after IssueKey.
type KeyInfo struct {
	// ID is the key's public identifier, embedded in the key.
	ID string `json:"id"`
	// TenantID is the owning tenant.
	TenantID string `json:"tenant_id"`
	// Prefix is the displayable start of the key, "wdn_<id>".
	Prefix string `json:"prefix"`
	// Name is an optional label chosen by the issuer.
	Name string `json:"name,omitempty"`
	// CreatedAt is when the key was issued.
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is set once the key is revoked.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Usage is the consumption of one tenant on one model during one UTC day.
type Usage struct {
	TenantID string `json:"tenant_id"`
	Model    string `json:"model"`
	// Day is the UTC date, formatted "2006-01-02".
	Day              string `json:"day"`
	Requests         int64  `json:"requests"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	// CachedTokens is the part of PromptTokens served from the prefix
	// cache; BilledTokens is what the requests were charged: prompt and
	// completion tokens with the cached ones at the tenant's
	// CachedTokenRate (Consumed.Billed).
	CachedTokens int64 `json:"cached_tokens"`
	BilledTokens int64 `json:"billed_tokens"`
}

// DayFormat is the layout of Usage.Day.
const DayFormat = "2006-01-02"

// ValidateID reports whether id is a valid tenant ID; the error wraps
// ErrInvalid.
func ValidateID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: tenant id %q must match [a-z0-9][a-z0-9_-]{0,62}", ErrInvalid, id)
	}
	return nil
}

// ValidateModelName reports whether name is usable as a model name: 1 to 256
// bytes of printable UTF-8 without spaces.
func ValidateModelName(name string) error {
	if err := validateLabel("model", name, maxModelLen); err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%w: model must not be empty", ErrInvalid)
	}
	if strings.ContainsFunc(name, unicode.IsSpace) {
		return fmt.Errorf("%w: model %q must not contain spaces", ErrInvalid, name)
	}
	return nil
}

// validateLabel checks a free-form string: valid UTF-8, no control
// characters, at most max bytes.
func validateLabel(field, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%w: %s is %d bytes, at most %d allowed", ErrInvalid, field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%w: %s must not contain control characters", ErrInvalid, field)
	}
	return nil
}

func validateCount(field string, v int64) error {
	if v < 0 {
		return fmt.Errorf("%w: %s must be >= 0 (0 means unlimited), got %d", ErrInvalid, field, v)
	}
	if v > MaxLimitValue {
		return fmt.Errorf("%w: %s must be <= %d, got %d", ErrInvalid, field, MaxLimitValue, v)
	}
	return nil
}

// Validate checks every field; the error wraps ErrInvalid and names the
// field ("limits.tokens_per_minute", ...).
func (l Limits) Validate() error {
	for _, c := range []struct {
		field string
		v     int64
	}{
		{"limits.requests_per_minute", l.RequestsPerMinute},
		{"limits.tokens_per_minute", l.TokensPerMinute},
		{"limits.max_concurrent", l.MaxConcurrent},
		{"limits.budget", l.Budget},
		{"limits.max_adapters", l.MaxAdapters},
	} {
		if err := validateCount(c.field, c.v); err != nil {
			return err
		}
	}
	if l.MaxPriority < 0 || l.MaxPriority > MaxRequestPriority {
		return fmt.Errorf("%w: limits.max_priority must be between 0 (priority 0 only) and %d, got %d",
			ErrInvalid, MaxRequestPriority, l.MaxPriority)
	}
	if l.BudgetPeriod != "" {
		if err := l.BudgetPeriod.Validate(); err != nil {
			return err
		}
	}
	for i, m := range l.AllowedModels {
		if err := ValidateModelName(m); err != nil {
			return fmt.Errorf("limits.allowed_models[%d]: %w", i, err)
		}
	}
	return nil
}

// Normalize validates t and returns a copy with defaults applied (Weight 1,
// BudgetPeriod month) and slices copied, ready to store.
func (t Tenant) Normalize() (Tenant, error) {
	if err := ValidateID(t.ID); err != nil {
		return Tenant{}, err
	}
	if err := validateLabel("name", t.Name, maxNameLen); err != nil {
		return Tenant{}, err
	}
	if t.Weight < 0 || t.Weight > MaxWeight {
		return Tenant{}, fmt.Errorf("%w: weight must be between 0 (default 1) and %d, got %d", ErrInvalid, MaxWeight, t.Weight)
	}
	if err := t.Limits.Validate(); err != nil {
		return Tenant{}, err
	}
	if _, err := cachekey.ParseMode(string(t.PrefixCache)); err != nil {
		return Tenant{}, fmt.Errorf("%w: prefix_cache: %w", ErrInvalid, err)
	}
	if t.CachedTokenRate != nil {
		if err := validateRate("cached_token_rate", *t.CachedTokenRate); err != nil {
			return Tenant{}, err
		}
		r := *t.CachedTokenRate
		t.CachedTokenRate = &r
	}
	if t.Weight == 0 {
		t.Weight = 1
	}
	if t.Limits.BudgetPeriod == "" {
		t.Limits.BudgetPeriod = PeriodMonth
	}
	t.Limits.AllowedModels = cloneStrings(t.Limits.AllowedModels)
	return t, nil
}

// Normalize validates m and returns a copy with its slice copied.
func (m ModelLimits) Normalize() (ModelLimits, error) {
	if err := ValidateModelName(m.Model); err != nil {
		return ModelLimits{}, err
	}
	if err := validateCount("max_context", m.MaxContext); err != nil {
		return ModelLimits{}, err
	}
	if err := validateCount("max_output_tokens", m.MaxOutputTokens); err != nil {
		return ModelLimits{}, err
	}
	for i, id := range m.AllowedTenants {
		if err := ValidateID(id); err != nil {
			return ModelLimits{}, fmt.Errorf("allowed_tenants[%d]: %w", i, err)
		}
	}
	m.AllowedTenants = cloneStrings(m.AllowedTenants)
	return m, nil
}

// ValidateKeyName checks the optional label of an API key.
func ValidateKeyName(name string) error {
	return validateLabel("key name", name, maxNameLen)
}

// Allows reports whether the tenant limits permit model.
func (l Limits) Allows(model string) bool {
	return len(l.AllowedModels) == 0 || slices.Contains(l.AllowedModels, model)
}

// Allows reports whether the model limits permit tenantID.
func (m ModelLimits) Allows(tenantID string) bool {
	return len(m.AllowedTenants) == 0 || slices.Contains(m.AllowedTenants, tenantID)
}

func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}
