// Package admin is warden's admin HTTP API, served by the gateway on its own
// listener (gateway.admin_listen). Platform teams manage tenants, API keys
// and limits through it; SREs inspect workers, models and requests and abort
// requests. `warden admin` and `warden check` are its clients
// (internal/adminclient, which also holds the wire types used here).
//
// # Routes (all under /admin/v1)
//
//	POST   /tenants                   create a tenant (adminclient.TenantCreate) → 201
//	GET    /tenants                   list tenants
//	GET    /tenants/{id}              one tenant
//	PATCH  /tenants/{id}              change name, weight, limits (field by field), disabled
//	DELETE /tenants/{id}              delete a tenant and revoke its keys
//	POST   /tenants/{id}/keys         issue a key: the plaintext is in this answer only → 201
//	GET    /tenants/{id}/keys         the tenant's keys (never their secrets)
//	GET    /keys?tenant=&prefix=      keys by tenant and/or display prefix ("wdn_ab…")
//	DELETE /keys/{key_id}             revoke a key
//	GET    /model-limits              every model's limits
//	GET    /model-limits/{model}      one model's limits
//	PUT    /model-limits/{model}      set a model's limits (context ceiling, max output, allowed tenants)
//	DELETE /model-limits/{model}      remove a model's limits
//	GET    /aliases                   model aliases in effect (configured and set here)
//	GET    /aliases/{name}            one alias
//	PUT    /aliases/{name}            create or repoint an alias ({"target": model}); kept in the tenant store
//	DELETE /aliases/{name}            remove an alias set here
//	GET    /usage?tenant=&from=&to=   usage per UTC day and model (days YYYY-MM-DD, default today)
//	GET    /workers                   registered workers and their KV pools
//	POST   /workers/{id}/cordon       stop new placements on a worker
//	POST   /workers/{id}/drain        cordon; the answer's idle says when its requests ended
//	POST   /workers/{id}/uncordon     place requests on a worker again
//	POST   /reload                    reload the configuration file (fields changed, or 409 naming those refused)
//	GET    /models                    configured vs effective context, per-worker capacity, verdict (I2)
//	GET    /requests?tenant=&model=   requests in flight
//	GET    /requests/{id}             one request, in flight or recently finished
//	POST   /requests/{id}/abort       abort a request (cause "admin")
//
// Model names may contain "/": send them escaped as %2F. Lists are
// {"data": [...]}; deletions answer {"id", "deleted": true}.
//
// # Authentication
//
// Every route, unknown ones included, requires "Authorization: Bearer
// <admin token>". The token is compared in constant time (digests of equal
// length, so not even its length leaks); a missing or wrong token is 401
// invalid_admin_token. An empty Config.Token refuses every request.
//
// # Errors and input
//
// Errors use the public API's envelope {"error":{"message","type","param",
// "code"}} (codes in internal/adminclient). Bodies are at most
// MaxBodyBytes (413), must be UTF-8 JSON objects, and are decoded
// strictly: an unknown field is 400 unknown_field with param naming it
// (e.g. "limits.rpm"), a value of the wrong type 400 invalid_type, bad
// syntax 400 invalid_json. Validation by the tenant store (tenant.ErrInvalid,
// whose message names the field) is 400 invalid_value; tenant.ErrNotFound
// and ErrNotFound are 404 not_found, tenant.ErrExists 409 already_exists,
// ErrFinished 409 request_finished, tenant.ErrUnavailable 503; anything
// else is a generic 500 whose cause is only logged.
//
// PATCH reads the tenant, applies the patch and writes it back: two
// concurrent patches of one tenant may lose one of them, which is acceptable
// for an operator API.
//
// # Audit log
//
// Every call is logged with slog once it is answered: action (e.g.
// "tenant.create"), target (tenant, key, model or request ID), outcome (ok,
// denied, rejected, failed), status and remote address. Changes are logged
// at Info, reads at Debug, refused tokens at Warn and 5xx at Error. An
// issued key is logged by its key ID only: the plaintext never reaches a log.
//
// # Prefix-cache salts (I8)
//
// warden has no prefix cache today, so there is no cache salt. This API
// accepts none, and the public API refuses client-supplied salts; if a
// prefix cache is added, its salt must be derived on the server from a
// server secret and the tenant ID, never taken from a client.
package admin
