// Package domainevict evicts a tenant's prefix-cache domains from every
// worker when the tenant's cached pages must go (DESIGN I8): the tenant
// is deleted or disabled, an API key of a tenant with per-key domains is
// revoked, the tenant's prefix_cache setting changes, or the tenant may no
// longer use a LoRA adapter.
//
// Store wraps the tenant store the admin API writes through: after such a
// change succeeded, it derives the domains concerned (the tenant domain
// and every per-key domain of the tenant's incarnation, or the revoked
// key's, each on the base model and under every adapter the tenant may
// use, Config.Adapters: an adapter is part of the domain, DESIGN I8a; or,
// through Store.EvictAdapter, those of one adapter the tenant lost) and
// Evictor calls EvictCacheDomains on every registered worker,
// in parallel and bounded by a timeout. Each worker's answer is its
// acknowledgement: the pages it freed or retired, and their hashes, which
// the routing index forgets at once (other gateways learn them from the
// worker's next heartbeat). warden_gateway_cache_domain_evictions_total
// counts the calls by reason and outcome.
//
// Eviction frees memory and honours the deletion; it is not what keeps a
// re-created tenant from the old pages. A worker that was unreachable
// keeps them until they age out, but no request can meet them: the
// domains derive from the tenant record's incarnation, and a re-created
// tenant, or one restored through the admin API, has a new one.
package domainevict
