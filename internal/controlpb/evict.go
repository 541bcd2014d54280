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
)

// EvictReasons lists every reason, for metric labels.
var EvictReasons = []string{EvictTenantDeleted, EvictTenantDisabled, EvictKeyRevoked, EvictPrefixCacheChanged}
