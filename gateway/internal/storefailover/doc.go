// Package storefailover keeps the gateway's tenant store working through
// a failover of the Redis behind it, and the gateway serving through an
// outage of the store.
//
// # Connecting
//
// NewClient builds the Redis client from the configuration: one server;
// a Redis Cluster seeded by every configured address; or a master found
// through Redis Sentinel. The cluster client follows MOVED and ASK, and
// reloads its slot map on every connection error, on CLUSTERDOWN and
// TRYAGAIN, and at least every ClusterReloadInterval, so once Redis has
// promoted a replica the next command goes to it: the store's error
// window is Redis's own failover time plus one reload. Timeouts are short
// and retries few, so a command against a dead master fails within about
// a second and the gateway falls back to degraded mode instead of
// hanging requests.
//
// # Degraded mode
//
// Store wraps a tenant.Store. While the store answers, everything goes
// to it, and Store remembers, per tenant, the tenant as the store last
// authenticated it and the quota the store last reported after an
// admission. When a call fails with tenant.ErrUnavailable, Store enters
// degraded mode (one log line, gauge warden_tenant_store_degraded = 1)
// and Acquire admits locally, from that snapshot:
//
//   - a tenant this gateway has not authenticated is refused with
//     tenant.ErrUnavailable (503, Retry-After), never admitted unchecked;
//     which keys authenticate is tenant.AuthCache's decision (a key the
//     store verified within the outage grace);
//   - a disabled tenant, a model not allowed (the tenant's list, and the
//     model's as of the gateway's model-limits snapshot) and a priority
//     above max_priority are refused as the store would;
//   - requests per minute, tokens per minute and max_concurrent are each
//     enforced at this gateway's share: the limit divided by the number of
//     live gateways (as of the last successful in-flight report), rounded
//     down. The rate buckets start from the share of what the store last
//     reported remaining (refilled since at the limit's rate), and refill
//     at the share of the rate; the concurrency share counts this
//     gateway's leases of the tenant, those the store admitted before the
//     outage included;
//   - the budget is not checked (its remaining value is not known
//     locally); what degraded requests consume is charged to it, and to
//     the token rate, when the store is back.
//
// The first successful call ends degraded mode (one log line, gauge 0):
// the local buckets are dropped and the store's counters rule again.
// Releasing a lease admitted locally records its usage in the store (so
// the release journal retries it until the store is back): the tokens
// spent during the outage are charged to the tenant on recovery.
package storefailover
