package redisstore

import (
	"context"

	"github.com/warden-ai/warden/tenant"
)

// decodeTenant parses a stored tenant record read from Redis. A record
// written before incarnations existed gets one first (assignIncarnation),
// so that no reader ever sees a tenant without one.
func (s *Store) decodeTenant(ctx context.Context, raw string) (tenant.Tenant, error) {
	r, err := decodeRecord(raw)
	if err != nil {
		return tenant.Tenant{}, err
	}
	if r.Incarnation == "" {
		if r, err = s.assignIncarnation(ctx, r.ID); err != nil {
			return tenant.Tenant{}, err
		}
	}
	return r.tenant(), nil
}

// assignIncarnation migrates tenant id's record from before incarnations:
// it stores a new incarnation in it unless it has one, atomically (under
// WATCH, retried when another replica wrote the record meanwhile), and
// returns the record as stored. Every replica that reads the old record
// concurrently thus ends up with the one incarnation that was stored
// first, and so derives the same prefix-cache domains (DESIGN I8). The
// tenant's pages cached before the migration were under domains without
// an incarnation and are never met again; they age out of the pools.
func (s *Store) assignIncarnation(ctx context.Context, id string) (tenantRecord, error) {
	return s.rewriteTenant(ctx, "assign tenant incarnation", id, func(r tenantRecord) (tenantRecord, bool) {
		if r.Incarnation != "" {
			return r, false
		}
		r.Incarnation = tenant.NewIncarnation()
		return r, true
	})
}
