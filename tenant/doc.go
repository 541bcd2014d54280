// Package tenant holds warden's multi-tenant state: tenants, API keys,
// admission limits, per-model limits and usage, behind the Store interface
// with two implementations, tenant/memstore (one process) and
// tenant/redisstore (shared by all gateway replicas). tenant/storetest is
// the conformance suite both pass.
//
// # API keys
//
// A key is "wdn_<id>_<secret>": an 8-character key ID and a 256-bit secret,
// lowercase base32. IssueKey returns the plaintext once; stores keep only
// HMAC-SHA-256(server secret, key). Authenticate parses the key, looks it up
// by ID, compares digests with hmac.Equal and checks that the key is not
// revoked and its tenant exists and is enabled. Every failure is the bare
// ErrUnauthenticated, never saying which check failed.
//
// AuthCache sits in front of a Store on each replica. It reuses a
// successful result for at most TTL (default 1 s), so a revoked key or a
// disabled tenant is refused by every replica within a second; failures are
// never cached, so a new key works at once.
//
// # Admission
//
// Store.Acquire decides atomically (one mutex in memory, one Lua script on
// Redis) and in this order, reporting the first failing check as a
// *LimitError and changing nothing when it denies:
//
//  1. the tenant exists (ErrNotFound) and is enabled (ErrForbidden);
//  2. the model is in the tenant's AllowedModels and the tenant in the
//     model's AllowedTenants, when those lists are set (ErrModelNotAllowed);
//  3. Priority <= MaxPriority (ErrForbidden); MaxPriority 0, the default,
//     allows priority 0 only, so no tenant may jump the queue unless an
//     operator allowed it;
//  4. the request fits at all: Tokens <= TokensPerMinute and
//     Tokens <= Budget, when set (ErrRequestTooLarge, a 400: retrying
//     cannot help);
//  5. budget: tokens used in the current period + Tokens <= Budget
//     (ErrInsufficientQuota);
//  6. requests per minute, 7. tokens per minute, 8. concurrent leases
//     (ErrRateLimited).
//
// On success it charges one request, holds Tokens against the token rate
// and the budget, and takes a concurrency slot; Lease.Release frees the slot
// and reconciles: the difference between the held Tokens and the actual
// prompt + completion tokens is refunded or charged to the token bucket and,
// if the budget period has not changed since admission, to the budget. The
// same Release records usage for (tenant, model, UTC day of the release).
// The gateway's own admission (not this package) enforces ModelLimits
// MaxContext and MaxOutputTokens.
//
// # Rate limit semantics
//
// Requests and tokens per minute are token buckets: a bucket holds at most
// L (the per-minute limit), starts full, refills continuously at L per
// minute, and admits a request only if it holds at least its cost (1
// request, or Tokens). Consequently:
//
//   - a burst is admitted exactly as far as the bucket's content allows:
//     with a full bucket, M > L simultaneous requests, spread over any
//     number of replicas, admit exactly L (check and charge are one atomic
//     step on the shared state);
//   - over any interval of length d at most L + L·d/1min are admitted (a
//     full burst, then the refill rate), plus, for tokens, what Release
//     refunds;
//   - usage beyond the hold can drive the token bucket negative (debt), which
//     blocks the tenant until refilled.
//
// The numbers on each decision (Quota, LimitError) are: Remaining =
// floor(bucket content), Reset = time until the bucket is full, RetryAfter =
// time until it holds the cost; durations are rounded up to the
// millisecond. A concurrency denial has RetryAfter ConcurrencyRetryAfter.
// Budget denials report the budget left and the time until the period ends.
// The Redis store takes time from the Redis server (one clock for all
// replicas); both stores accept an injected clock for tests.
//
// Budgets count tokens (held, then reconciled) per BudgetPeriod: the UTC day,
// the UTC month (default), or a fixed duration aligned to the Unix epoch.
//
// # Leases
//
// A lease holds its concurrency slot until Release or until ExpiresAt
// (lease TTL after admission, default 10 minutes; Renew extends it). A
// gateway that crashes therefore leaks slots for at most one TTL; its held
// tokens stay charged. Release succeeds once per lease; a failed Release
// may be retried.
//
// # Requests in flight across replicas
//
// Store.ShareInFlight holds each gateway replica's count of requests in
// flight per tenant next to the concurrency leases; a report replaces the
// replica's previous one and counts until its TTL passes on the store's
// clock, and the answer is the fleet's sums. FleetInFlight is a replica's
// side: live counts of its own, the others' as of its last report (Run
// reports every interval), and none of the others' while the store is
// unreachable (Degraded). The gateway's fair queue uses them to charge a
// tenant for its service at other replicas.
//
// # Per-model limits
//
// SetModelLimits takes effect for Acquire on every replica at once (read
// in the same atomic step). ModelLimitsCache serves them to the gateway's
// admission from a snapshot at most DefaultModelLimitsTTL (2 s) old.
//
// # Redis outages
//
// A gateway never crashes because Redis is gone; Store calls return errors
// wrapping ErrUnavailable (HTTP 503) and the go-redis client reconnects by
// itself when Redis returns. During an outage:
//
//   - Authenticate (through AuthCache) accepts keys it verified within the
//     grace period (default 30 s) and refuses all others with
//     ErrUnavailable; a key revoked just before the outage can thus be
//     accepted for up to the grace period;
//   - Acquire fails closed with ErrUnavailable, or, with
//     redisstore.WithFailOpen, admits without checks and returns a lease
//     marked Degraded that holds nothing; its Release charges the actual
//     tokens and records usage if Redis is back by then. The gateway
//     wraps the store (gateway/internal/storefailover), which admits
//     known tenants under the gateway's share of their limits instead of
//     failing;
//   - Release fails with ErrUnavailable and may be retried; leases the
//     gateway gives up on expire after their TTL;
//   - ModelLimitsCache keeps serving its last snapshot.
package tenant
