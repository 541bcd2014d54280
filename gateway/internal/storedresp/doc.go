// Package storedresp keeps the Responses API's stored responses (a
// request with "store": true): the conversation a response continues and
// the response object as returned, so that a later request can continue
// it with previous_response_id and a client can GET or DELETE it by ID.
//
// A stored response belongs to one tenant incarnation, and that is kept
// three ways:
//
//   - Namespace: its key names the tenant, so another tenant's lookup of
//     the same ID finds nothing — the API answers it exactly as a missing
//     ID.
//   - Encryption at rest: the record is sealed with AES-256-GCM under a key
//     derived (HMAC-SHA256) from the server secret, the tenant and the
//     tenant's incarnation, with the tenant and the ID as associated data.
//     A tenant deleted and created again under the same name gets a new
//     incarnation, so it cannot open what its predecessor stored (DESIGN
//     I8): the record reads as missing and is removed. Deleting a tenant
//     through the admin API also removes its records at once (Purging).
//     Whoever reads the backend (a Redis dump, a replica) sees only
//     sealed bytes.
//   - Bounds: every record expires after the TTL, and a tenant's records
//     together stay under a byte bound — storing past it evicts that
//     tenant's oldest records first, never another tenant's.
//
// The bytes live in a Backend: Redis in production (shared by every
// gateway replica; the tenant's keys share a hash slot, so the bound is
// kept by one atomic script even on a Redis Cluster) or memory.
package storedresp
