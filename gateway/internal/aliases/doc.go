// Package aliases resolves model aliases: names a platform team gives a
// served model (several names for one model, or a stable name such as
// "default" that it repoints from one model to another).
//
// Aliases come from two places: the configuration (models[].aliases,
// fixed until restart) and the admin API (PUT/DELETE
// /admin/v1/aliases/{name}), kept in the tenant store (Redis in
// production) so that every gateway replica sees them. An alias set
// through the admin API overrides a configured one of the same name;
// deleting it uncovers the configured one again.
//
// A Resolver serves them from a snapshot of the store refreshed every
// TTL (DefaultTTL), so a change made through any replica reaches every
// replica within TTL; the replica that made the change calls Invalidate
// and sees it at once. If a refresh fails the previous snapshot keeps
// being served, and before the first successful load the configured
// aliases alone: a store outage never refuses requests (DESIGN I13),
// though an alias set through the admin API is unknown to a replica
// that started during the outage until the store is back.
//
// An alias names a model, never another alias: resolution is one step.
// A request to an alias is served as a request to its target in every
// respect (admission, per-model limits, the tenant's allowed models,
// usage and metrics): limits follow the target.
package aliases
