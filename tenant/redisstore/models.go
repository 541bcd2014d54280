package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// SetModelLimits implements tenant.Store.
func (s *Store) SetModelLimits(ctx context.Context, m tenant.ModelLimits) error {
	m, err := m.Normalize()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.key("m", m.Model), raw, 0)
		p.SAdd(ctx, s.key("models"), m.Model)
		return nil
	})
	if err != nil {
		return s.fail(ctx, "set model limits", err)
	}
	s.ok()
	return nil
}

// GetModelLimits implements tenant.Store.
func (s *Store) GetModelLimits(ctx context.Context, model string) (tenant.ModelLimits, error) {
	if err := tenant.ValidateModelName(model); err != nil {
		return tenant.ModelLimits{}, err
	}
	raw, err := s.rdb.Get(ctx, s.key("m", model)).Result()
	if errors.Is(err, redis.Nil) {
		s.ok()
		return tenant.ModelLimits{}, fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	if err != nil {
		return tenant.ModelLimits{}, s.fail(ctx, "get model limits", err)
	}
	s.ok()
	return decodeModel(raw)
}

func decodeModel(raw string) (tenant.ModelLimits, error) {
	var m tenant.ModelLimits
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return tenant.ModelLimits{}, fmt.Errorf("redisstore: corrupt model limits: %w", err)
	}
	return m, nil
}

// ListModelLimits implements tenant.ModelLimitsSource.
func (s *Store) ListModelLimits(ctx context.Context) ([]tenant.ModelLimits, error) {
	names, err := s.rdb.SMembers(ctx, s.key("models")).Result()
	if err != nil {
		return nil, s.fail(ctx, "list model limits", err)
	}
	slices.Sort(names)
	raws, err := s.mget(ctx, "m", names)
	if err != nil {
		return nil, s.fail(ctx, "list model limits", err)
	}
	s.ok()
	out := make([]tenant.ModelLimits, 0, len(raws))
	for _, raw := range raws {
		m, err := decodeModel(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// DeleteModelLimits implements tenant.Store.
func (s *Store) DeleteModelLimits(ctx context.Context, model string) error {
	if err := tenant.ValidateModelName(model); err != nil {
		return err
	}
	n, err := s.sc.deleteModel.Run(ctx, s.rdb, []string{s.key("m", model), s.key("models")}, model).Int()
	if err != nil {
		return s.fail(ctx, "delete model limits", err)
	}
	s.ok()
	if n != 0 {
		return fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	return nil
}
