package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/warden-ai/warden/tenant"
)

type keyRecord struct {
	info   tenant.KeyInfo
	digest []byte
}

// IssueKey implements tenant.Store.
func (s *Store) IssueKey(_ context.Context, tenantID, name string) (string, tenant.KeyInfo, error) {
	if err := tenant.ValidateID(tenantID); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	if err := tenant.ValidateKeyName(name); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[tenantID]; !ok {
		return "", tenant.KeyInfo{}, fmt.Errorf("tenant %q: %w", tenantID, tenant.ErrNotFound)
	}
	for {
		key, id, err := tenant.NewKey()
		if err != nil {
			return "", tenant.KeyInfo{}, err
		}
		if _, taken := s.keys[id]; taken {
			continue // 40-bit ID collision: draw again
		}
		info := tenant.KeyInfo{
			ID: id, TenantID: tenantID, Prefix: tenant.KeyDisplayPrefix(id),
			Name: name, CreatedAt: s.now().UTC(),
		}
		s.keys[id] = keyRecord{info: info, digest: s.hasher.Sum(key)}
		return key, info, nil
	}
}

// ListKeys implements tenant.Store.
func (s *Store) ListKeys(_ context.Context, f tenant.KeyFilter) ([]tenant.KeyInfo, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []tenant.KeyInfo
	for _, k := range s.keys {
		if (f.TenantID == "" || k.info.TenantID == f.TenantID) && strings.HasPrefix(k.info.Prefix, f.Prefix) {
			out = append(out, cloneKeyInfo(k.info))
		}
	}
	slices.SortFunc(out, func(a, b tenant.KeyInfo) int {
		return cmp.Or(strings.Compare(a.TenantID, b.TenantID), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// RevokeKey implements tenant.Store.
func (s *Store) RevokeKey(_ context.Context, keyID string) error {
	if err := tenant.ValidateKeyID(keyID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[keyID]
	if !ok {
		return fmt.Errorf("key %q: %w", keyID, tenant.ErrNotFound)
	}
	if k.info.RevokedAt == nil {
		now := s.now().UTC()
		k.info.RevokedAt = &now
		s.keys[keyID] = k
	}
	return nil
}

// Authenticate implements tenant.Authenticator.
func (s *Store) Authenticate(_ context.Context, presented string) (tenant.Principal, error) {
	id, err := tenant.ParseKey(presented)
	if err != nil {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.keys[id]
	if !ok || !s.hasher.Match(presented, k.digest) || k.info.RevokedAt != nil {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	t, ok := s.tenants[k.info.TenantID]
	if !ok || t.Disabled {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	return tenant.Principal{Tenant: cloneTenant(t), KeyID: id}, nil
}

func cloneKeyInfo(k tenant.KeyInfo) tenant.KeyInfo {
	if k.RevokedAt != nil {
		r := *k.RevokedAt
		k.RevokedAt = &r
	}
	return k
}
