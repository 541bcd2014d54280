package storefailover

import (
	"fmt"
	"math"
	"time"

	"github.com/warden-ai/warden/tenant"
)

// shares are one tenant's limits at this gateway during an outage: its
// share of each (the limit divided by the live gateways, rounded down),
// with token buckets like the store's (see the tenant package doc).
type shares struct {
	requests, tokens bucket
	concurrent       int64 // -1: unlimited
}

// errShareTooSmall refuses a request that this gateway's share of a limit
// cannot hold although the whole limit could: only the store can admit
// it, so it is a 503 with Retry-After, not a 400 or a 429.
var errShareTooSmall = fmt.Errorf("%w: this gateway's share of the tenant's limits during the store outage cannot hold the request", tenant.ErrUnavailable)

// bucket is a token bucket of capacity size refilled at size per minute;
// size 0 with limited set admits nothing.
type bucket struct {
	limited bool
	size    float64
	level   float64
	at      time.Time
}

// newShares divides limits among gateways. Each rate bucket starts at the
// share of what the store last reported remaining (quota, at seen),
// refilled since at the full limit's rate, or full when the store never
// reported one.
func newShares(limits tenant.Limits, gateways int, quota tenant.Quota, seen time.Time, now time.Time) *shares {
	n := int64(max(gateways, 1))
	start := func(limit, remaining int64) bucket {
		if limit <= 0 {
			return bucket{}
		}
		size := float64(limit / n)
		level := size
		if !seen.IsZero() {
			left := math.Min(float64(limit), float64(remaining)+float64(limit)*now.Sub(seen).Minutes())
			level = math.Min(size, math.Floor(left/float64(n)))
		}
		return bucket{limited: true, size: size, level: max(level, 0), at: now}
	}
	sh := &shares{
		requests:   start(limits.RequestsPerMinute, quota.RemainingRequests),
		tokens:     start(limits.TokensPerMinute, quota.RemainingTokens),
		concurrent: -1,
	}
	if limits.MaxConcurrent > 0 {
		sh.concurrent = limits.MaxConcurrent / n
	}
	return sh
}

// refill brings the bucket to now.
func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.level = math.Min(b.size, b.level+b.size*d.Minutes())
		b.at = now
	}
}

// wait is the time until the bucket holds cost.
func (b *bucket) wait(cost float64) time.Duration {
	if b.size <= 0 || cost > b.size {
		return 0
	}
	return time.Duration(math.Ceil((cost - b.level) / b.size * float64(time.Minute)))
}

// take admits req if this gateway's shares allow it, with active leases
// of the tenant already here, and returns the tokens held: req.Tokens,
// or for a flexible request what the token share has left, capped at
// req.Tokens and at least req.MinTokens. A denial is the *tenant.LimitError
// the store would give at these shares.
func (sh *shares) take(req tenant.AcquireRequest, active int64, now time.Time) (int64, error) {
	sh.requests.refill(now)
	sh.tokens.refill(now)
	quota := sh.quota()
	need := req.Tokens
	if req.MinTokens > 0 && req.MinTokens < req.Tokens {
		need = req.MinTokens
	}
	if (sh.requests.limited && sh.requests.size < 1) || sh.concurrent == 0 || (sh.tokens.limited && float64(need) > sh.tokens.size) {
		return 0, errShareTooSmall
	}
	if sh.requests.limited && sh.requests.level < 1 {
		return 0, sh.denied(tenant.KindRequests, &sh.requests, 1, quota)
	}
	held := req.Tokens
	if sh.tokens.limited {
		if sh.tokens.level < float64(need) {
			return 0, sh.denied(tenant.KindTokens, &sh.tokens, float64(need), quota)
		}
		held = min(req.Tokens, max(need, int64(sh.tokens.level)))
	}
	if sh.concurrent >= 0 && active >= sh.concurrent {
		return 0, &tenant.LimitError{Kind: tenant.KindConcurrency, Limit: sh.concurrent, RetryAfter: tenant.ConcurrencyRetryAfter, Quota: quota}
	}
	if sh.requests.limited {
		sh.requests.level--
	}
	if sh.tokens.limited {
		sh.tokens.level -= float64(held)
	}
	return held, nil
}

// denied describes a rate denial of cost from b.
func (sh *shares) denied(kind tenant.LimitKind, b *bucket, cost float64, quota tenant.Quota) error {
	return &tenant.LimitError{Kind: kind, Limit: int64(b.size), Remaining: int64(max(b.level, 0)),
		Reset: b.wait(b.size), RetryAfter: b.wait(cost), Quota: quota}
}

// settle refunds (or charges) the difference between held and used
// tokens, as the store does at release.
func (sh *shares) settle(held, used int64, now time.Time) {
	if sh.tokens.limited {
		sh.tokens.refill(now)
		sh.tokens.level = math.Min(sh.tokens.size, sh.tokens.level-float64(used-held))
	}
}

// quota is the state of the shares for the x-ratelimit-* headers.
func (sh *shares) quota() tenant.Quota {
	var q tenant.Quota
	if b := sh.requests; b.limited {
		q.LimitRequests, q.RemainingRequests, q.ResetRequests = int64(b.size), int64(max(b.level, 0)), b.wait(b.size)
	}
	if b := sh.tokens; b.limited {
		q.LimitTokens, q.RemainingTokens, q.ResetTokens = int64(b.size), int64(max(b.level, 0)), b.wait(b.size)
	}
	return q
}
