package tenant

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Stores wrap them with %w; callers map them with errors.Is
// (suggested HTTP status in brackets).
var (
	// ErrNotFound: the tenant, key or model limits do not exist [404].
	ErrNotFound = errors.New("not found")
	// ErrExists: a tenant with that ID already exists [409].
	ErrExists = errors.New("already exists")
	// ErrInvalid: bad input; the message names the field [400].
	ErrInvalid = errors.New("invalid argument")
	// ErrUnauthenticated: the presented API key is not valid. It never says
	// which part failed (format, unknown key, wrong secret, revoked,
	// disabled tenant) [401 invalid_api_key].
	ErrUnauthenticated = errors.New("invalid API key")
	// ErrForbidden: the tenant is disabled, or asked for a priority above
	// its maximum [403].
	ErrForbidden = errors.New("forbidden")
	// ErrRateLimited: a requests, tokens or concurrency limit denied the
	// request for now; see LimitError.RetryAfter [429 rate_limit_exceeded].
	ErrRateLimited = errors.New("rate limit exceeded")
	// ErrInsufficientQuota: the budget for the current period is used up
	// [429 insufficient_quota].
	ErrInsufficientQuota = errors.New("insufficient quota")
	// ErrModelNotAllowed: the tenant may not use the model [403 or 404].
	ErrModelNotAllowed = errors.New("model not allowed")
	// ErrRequestTooLarge: the request alone exceeds a tenant limit (tokens
	// per minute or the whole budget), so retrying can never succeed [400].
	ErrRequestTooLarge = errors.New("request exceeds tenant limit")
	// ErrUnavailable: the backing store cannot be reached [503].
	ErrUnavailable = errors.New("tenant store unavailable")
	// ErrLeaseExpired: the lease outlived its TTL and its concurrency slot
	// was reclaimed.
	ErrLeaseExpired = errors.New("lease expired")
	// ErrLeaseReleased: the lease was already released.
	ErrLeaseReleased = errors.New("lease already released")
)

// LimitKind names the limit that denied a request.
type LimitKind string

// Limit kinds reported in LimitError.Kind.
const (
	KindRequests    LimitKind = "requests"
	KindTokens      LimitKind = "tokens"
	KindConcurrency LimitKind = "concurrency"
	KindBudget      LimitKind = "budget"
	KindModel       LimitKind = "model"
	KindPriority    LimitKind = "priority"
)

// LimitError is the denial returned by Store.Acquire. errors.Is maps it to
// ErrRateLimited (requests, tokens, concurrency), ErrInsufficientQuota
// (budget), ErrModelNotAllowed (model), ErrForbidden (priority), or
// ErrRequestTooLarge when Unsatisfiable.
type LimitError struct {
	// Kind is the limit that denied the request.
	Kind LimitKind
	// Limit is that limit's configured value (MaxPriority for priority, 0
	// for model).
	Limit int64
	// Remaining is what is left of the limit now (requests, tokens, slots
	// or budget tokens).
	Remaining int64
	// Reset is the time until the limit is back to its full value.
	Reset time.Duration
	// RetryAfter is the earliest time a retry of the same request can
	// succeed, as far as this limit is concerned (0 when it never can).
	RetryAfter time.Duration
	// Unsatisfiable is true when the request alone exceeds the limit.
	Unsatisfiable bool
	// Quota carries the numbers for the x-ratelimit-* headers.
	Quota Quota
}

// Error describes the denial without naming any other tenant's data.
func (e *LimitError) Error() string {
	var b strings.Builder
	switch e.Kind {
	case KindModel:
		return "model not allowed for this tenant"
	case KindPriority:
		fmt.Fprintf(&b, "priority above the tenant maximum of %d", e.Limit)
		return b.String()
	case KindConcurrency:
		fmt.Fprintf(&b, "concurrent request limit of %d reached", e.Limit)
	case KindBudget:
		fmt.Fprintf(&b, "token budget of %d for this period", e.Limit)
		if e.Unsatisfiable {
			b.WriteString(" is smaller than the request")
		} else {
			fmt.Fprintf(&b, " exhausted (%d left)", e.Remaining)
		}
	default:
		fmt.Fprintf(&b, "rate limit of %d %s per minute", e.Limit, e.Kind)
		if e.Unsatisfiable {
			b.WriteString(" is smaller than the request")
		} else {
			fmt.Fprintf(&b, " reached (%d left)", e.Remaining)
		}
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, "; retry after %v", e.RetryAfter)
	}
	return b.String()
}

// Is maps the denial to the package's sentinel errors.
func (e *LimitError) Is(target error) bool {
	if e.Unsatisfiable {
		return target == ErrRequestTooLarge
	}
	switch e.Kind {
	case KindRequests, KindTokens, KindConcurrency:
		return target == ErrRateLimited
	case KindBudget:
		return target == ErrInsufficientQuota
	case KindModel:
		return target == ErrModelNotAllowed
	case KindPriority:
		return target == ErrForbidden
	}
	return false
}
