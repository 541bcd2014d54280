package redisstore

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// IssueKey implements tenant.Store.
func (s *Store) IssueKey(ctx context.Context, tenantID, name string) (string, tenant.KeyInfo, error) {
	if err := tenant.ValidateID(tenantID); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	if err := tenant.ValidateKeyName(name); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	for range 10 {
		key, id, err := tenant.NewKey()
		if err != nil {
			return "", tenant.KeyInfo{}, err
		}
		info := tenant.KeyInfo{
			ID: id, TenantID: tenantID, Prefix: tenant.KeyDisplayPrefix(id), Name: name, CreatedAt: s.wallNow(),
		}
		keys := []string{s.key("t", tenantID), s.key("k", id), s.key("tk", tenantID), s.key("keys")}
		n, err := s.sc.issueKey.Run(ctx, s.rdb, keys, id, tenantID, hex.EncodeToString(s.hasher.Sum(key)),
			info.Prefix, name, info.CreatedAt.Format(time.RFC3339Nano)).Int()
		if err != nil {
			return "", tenant.KeyInfo{}, s.fail(ctx, "issue key", err)
		}
		s.ok()
		switch n {
		case 0:
			return key, info, nil
		case 1:
			return "", tenant.KeyInfo{}, fmt.Errorf("tenant %q: %w", tenantID, tenant.ErrNotFound)
		}
		// 2: 40-bit key ID collision, draw again
	}
	return "", tenant.KeyInfo{}, errors.New("redisstore: issue key: no free key ID after 10 draws")
}

// ListKeys implements tenant.Store.
func (s *Store) ListKeys(ctx context.Context, f tenant.KeyFilter) ([]tenant.KeyInfo, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	set := s.key("keys")
	if f.TenantID != "" {
		set = s.key("tk", f.TenantID)
	}
	ids, err := s.rdb.SMembers(ctx, set).Result()
	if err != nil {
		return nil, s.fail(ctx, "list keys", err)
	}
	ids = slices.DeleteFunc(ids, func(id string) bool {
		return !strings.HasPrefix(tenant.KeyDisplayPrefix(id), f.Prefix)
	})
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, s.key("k", id))
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, "list keys", err)
	}
	s.ok()
	out := make([]tenant.KeyInfo, 0, len(ids))
	for _, c := range cmds {
		h := c.Val()
		if len(h) == 0 || (f.TenantID != "" && h["tenant"] != f.TenantID) {
			continue
		}
		info := tenant.KeyInfo{ID: h["id"], TenantID: h["tenant"], Prefix: h["prefix"], Name: h["name"]}
		if info.CreatedAt, err = time.Parse(time.RFC3339Nano, h["created"]); err != nil {
			return nil, fmt.Errorf("redisstore: corrupt key record %q: %w", info.ID, err)
		}
		if r := h["revoked"]; r != "" {
			t, err := time.Parse(time.RFC3339Nano, r)
			if err != nil {
				return nil, fmt.Errorf("redisstore: corrupt key record %q: %w", info.ID, err)
			}
			info.RevokedAt = &t
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b tenant.KeyInfo) int {
		return cmp.Or(strings.Compare(a.TenantID, b.TenantID), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// RevokeKey implements tenant.Store.
func (s *Store) RevokeKey(ctx context.Context, keyID string) error {
	if err := tenant.ValidateKeyID(keyID); err != nil {
		return err
	}
	n, err := s.sc.revokeKey.Run(ctx, s.rdb, []string{s.key("k", keyID)}, s.wallNow().Format(time.RFC3339Nano)).Int()
	if err != nil {
		return s.fail(ctx, "revoke key", err)
	}
	s.ok()
	if n != 0 {
		return fmt.Errorf("key %q: %w", keyID, tenant.ErrNotFound)
	}
	return nil
}

// Authenticate implements tenant.Authenticator with one round trip.
func (s *Store) Authenticate(ctx context.Context, presented string) (tenant.Principal, error) {
	id, err := tenant.ParseKey(presented)
	if err != nil {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	res, err := s.sc.auth.Run(ctx, s.rdb, []string{s.key("k", id)}, s.key("t", "")).StringSlice()
	if errors.Is(err, redis.Nil) {
		s.ok()
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	if err != nil {
		return tenant.Principal{}, s.fail(ctx, "authenticate", err)
	}
	s.ok()
	if len(res) != 4 {
		return tenant.Principal{}, fmt.Errorf("redisstore: authenticate: unexpected reply of %d values", len(res))
	}
	digest, err := hex.DecodeString(res[1])
	if err != nil || !s.hasher.Match(presented, digest) || res[2] != "" || res[3] == "" {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	t, err := s.decodeTenant(ctx, res[3])
	if err != nil {
		return tenant.Principal{}, err
	}
	if t.Disabled || t.ID != res[0] {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	return tenant.Principal{Tenant: t, KeyID: id}, nil
}
