package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// CreateTenant implements tenant.Store.
func (s *Store) CreateTenant(ctx context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	t.CreatedAt, t.Incarnation = s.wallNow(), tenant.NewIncarnation()
	raw, err := json.Marshal(toRecord(t))
	if err != nil {
		return tenant.Tenant{}, err
	}
	n, err := s.sc.createTenant.Run(ctx, s.rdb, []string{s.key("t", t.ID), s.key("tenants")}, raw, t.ID).Int()
	if err != nil {
		return tenant.Tenant{}, s.fail(ctx, "create tenant", err)
	}
	s.ok()
	if n != 0 {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", t.ID, tenant.ErrExists)
	}
	return t, nil
}

// GetTenant implements tenant.Store.
func (s *Store) GetTenant(ctx context.Context, id string) (tenant.Tenant, error) {
	if err := tenant.ValidateID(id); err != nil {
		return tenant.Tenant{}, err
	}
	raw, err := s.rdb.Get(ctx, s.key("t", id)).Result()
	if errors.Is(err, redis.Nil) {
		s.ok()
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	if err != nil {
		return tenant.Tenant{}, s.fail(ctx, "get tenant", err)
	}
	s.ok()
	return s.decodeTenant(ctx, raw)
}

// ListTenants implements tenant.Store.
func (s *Store) ListTenants(ctx context.Context) ([]tenant.Tenant, error) {
	ids, err := s.rdb.SMembers(ctx, s.key("tenants")).Result()
	if err != nil {
		return nil, s.fail(ctx, "list tenants", err)
	}
	slices.Sort(ids)
	raws, err := s.mget(ctx, "t", ids)
	if err != nil {
		return nil, s.fail(ctx, "list tenants", err)
	}
	s.ok()
	out := make([]tenant.Tenant, 0, len(raws))
	for _, raw := range raws {
		t, err := s.decodeTenant(ctx, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// mget reads the string keys kind:<id> for ids, skipping missing ones.
func (s *Store) mget(ctx context.Context, kind string, ids []string) ([]string, error) {
	var out []string
	for chunk := range slices.Chunk(ids, 500) {
		keys := make([]string, len(chunk))
		for i, id := range chunk {
			keys[i] = s.key(kind, id)
		}
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			if str, ok := v.(string); ok {
				out = append(out, str)
			}
		}
	}
	return out, nil
}

// UpdateTenant implements tenant.Store. It keeps CreatedAt and the
// incarnation under WATCH so a concurrent delete makes it fail with
// ErrNotFound rather than resurrect the tenant.
func (s *Store) UpdateTenant(ctx context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	_, err = s.rewriteTenant(ctx, "update tenant", t.ID, func(old tenantRecord) (tenantRecord, bool) {
		t.CreatedAt, t.Incarnation = old.CreatedAt, old.Incarnation
		if t.Incarnation == "" {
			t.Incarnation = tenant.NewIncarnation() // a record from before incarnations
		}
		return toRecord(t), true
	})
	if err != nil {
		return tenant.Tenant{}, err
	}
	return t, nil
}

// rewriteTenant replaces tenant id's record with what change makes of it,
// under WATCH (retried when a concurrent write intervened), unless change
// says there is nothing to write; it returns the record now stored. A
// missing record is ErrNotFound.
func (s *Store) rewriteTenant(ctx context.Context, op, id string, change func(tenantRecord) (tenantRecord, bool)) (tenantRecord, error) {
	k := s.key("t", id)
	var (
		out    tenantRecord
		recErr error // a corrupt record, not a Redis failure
		err    error
	)
	for range 10 {
		err = s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			raw, err := tx.Get(ctx, k).Result()
			if err != nil {
				return err
			}
			old, err := decodeRecord(raw)
			if err != nil {
				recErr = err
				return err
			}
			rec, write := change(old)
			if !write {
				out = old
				return nil
			}
			b, err := json.Marshal(rec)
			if err != nil {
				recErr = err
				return err
			}
			if _, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, k, b, 0)
				return nil
			}); err == nil {
				out = rec
			}
			return err
		}, k)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	switch {
	case recErr != nil:
		return tenantRecord{}, recErr
	case errors.Is(err, redis.Nil):
		s.ok()
		return tenantRecord{}, fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	case err != nil:
		return tenantRecord{}, s.fail(ctx, op, err)
	}
	s.ok()
	return out, nil
}

// DeleteTenant implements tenant.Store.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	if err := tenant.ValidateID(id); err != nil {
		return err
	}
	keys := []string{s.key("t", id), s.key("tenants"), s.key("tk", id), s.key("rl", id), s.key("bg", id), s.key("cc", id)}
	n, err := s.sc.deleteTenant.Run(ctx, s.rdb, keys, id, s.key("k", ""), s.wallNow().Format(time.RFC3339Nano)).Int()
	if err != nil {
		return s.fail(ctx, "delete tenant", err)
	}
	s.ok()
	if n != 0 {
		return fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	return s.dropTenantAdapters(ctx, id)
}
