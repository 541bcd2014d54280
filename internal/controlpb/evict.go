package controlpb

// MaxEvictDomains bounds the domains one EvictCacheDomainsRequest names;
// the gateway sends more in several calls.
const MaxEvictDomains = 4096

// Reasons of EvictCacheDomainsRequest.reason: why the domains' pages go.
const (
	EvictTenantDeleted      = "tenant_deleted"
	EvictTenantDisabled     = "tenant_disabled"
	EvictKeyRevoked         = "key_revoked"
	EvictPrefixCacheChanged = "prefix_cache_changed"
	// EvictAdapterRemoved: a tenant may no longer use a LoRA adapter (it
	// was deleted, or no longer shared with the tenant); the domains of
	// the tenant's requests under it go. Not for good: the same adapter
	// content may be allowed again.
	EvictAdapterRemoved = "adapter_removed"
)

// EvictReasons lists every reason, for metric labels.
var EvictReasons = []string{EvictTenantDeleted, EvictTenantDisabled, EvictKeyRevoked, EvictPrefixCacheChanged, EvictAdapterRemoved}
