package tenant

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// DefaultModelLimitsTTL is how long ModelLimitsCache reuses a snapshot: the
// bound on how late a SetModelLimits reaches every replica.
const DefaultModelLimitsTTL = 2 * time.Second

// ModelLimitsCacheConfig configures a ModelLimitsCache; zero fields take the
// defaults.
type ModelLimitsCacheConfig struct {
	// TTL is the snapshot lifetime. Default DefaultModelLimitsTTL.
	TTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives refresh failures; default slog.Default().
	Logger *slog.Logger
}

// ModelLimitsCache serves per-model limits to the gateway's admission from a
// snapshot of ListModelLimits refreshed every TTL, so a change made through
// any replica is seen by all within TTL without a restart. If a refresh
// fails the previous snapshot keeps being served (limits change rarely, and
// failing every request would be worse); only the first load can fail.
type ModelLimitsCache struct {
	src ModelLimitsSource
	cfg ModelLimitsCacheConfig

	mu      sync.Mutex
	loaded  bool
	fetched time.Time // last refresh attempt
	good    time.Time // last successful refresh
	list    []ModelLimits
	byModel map[string]ModelLimits
}

// NewModelLimitsCache returns a cache reading from src.
func NewModelLimitsCache(src ModelLimitsSource, cfg ModelLimitsCacheConfig) *ModelLimitsCache {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultModelLimitsTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &ModelLimitsCache{src: src, cfg: cfg}
}

// Get returns the limits of model and whether any are configured.
func (c *ModelLimitsCache) Get(ctx context.Context, model string) (ModelLimits, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refreshLocked(ctx); err != nil {
		return ModelLimits{}, false, err
	}
	m, ok := c.byModel[model]
	m.AllowedTenants = slices.Clone(m.AllowedTenants)
	return m, ok, nil
}

// List returns the limits of all models sorted by model.
func (c *ModelLimitsCache) List(ctx context.Context) ([]ModelLimits, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refreshLocked(ctx); err != nil {
		return nil, err
	}
	out := make([]ModelLimits, len(c.list))
	for i, m := range c.list {
		m.AllowedTenants = slices.Clone(m.AllowedTenants)
		out[i] = m
	}
	return out, nil
}

// refreshLocked reloads the snapshot when it is older than TTL. Callers
// wait for one refresh at a time, which also collapses concurrent reloads.
func (c *ModelLimitsCache) refreshLocked(ctx context.Context) error {
	now := c.cfg.Now()
	if c.loaded && now.Sub(c.fetched) < c.cfg.TTL {
		return nil
	}
	list, err := c.src.ListModelLimits(ctx)
	if err != nil {
		if !c.loaded {
			return err
		}
		c.cfg.Logger.Warn("model limits refresh failed; serving the previous snapshot",
			"age", now.Sub(c.good), "err", err)
		// Back off for one TTL instead of retrying on every request.
		c.fetched = now
		return nil
	}
	c.list = list
	c.byModel = make(map[string]ModelLimits, len(list))
	for _, m := range list {
		c.byModel[m.Model] = m
	}
	c.fetched, c.good, c.loaded = now, now, true
	return nil
}
