package aliases

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-ai/warden/tenant"
)

// DefaultTTL is how long a Resolver reuses a snapshot of the store: the
// bound on how late an alias change made through another replica is seen.
const DefaultTTL = 2 * time.Second

// Source lists the aliases set through the admin API (the tenant store).
type Source interface {
	ListAliases(ctx context.Context) ([]tenant.Alias, error)
}

var _ Source = tenant.AliasStore(nil)

// Where an alias was set.
const (
	FromConfig = "config"
	FromAdmin  = "admin"
)

// Entry is one alias in effect.
type Entry struct {
	Name   string
	Target string
	// Source is FromConfig or FromAdmin.
	Source string
}

// Config configures a Resolver; zero fields take the defaults.
type Config struct {
	// Static are the configured aliases, alias → target.
	Static map[string]string
	// TTL is the snapshot lifetime; default DefaultTTL.
	TTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives refresh failures; default slog.Default().
	Logger *slog.Logger
}

// Resolver resolves aliases to their targets (see the package
// documentation). It is safe for concurrent use.
type Resolver struct {
	src Source
	cfg Config

	mu      sync.Mutex
	loaded  bool
	fetched time.Time // last refresh attempt
	good    time.Time // last successful refresh
	admin   map[string]string
}

// New returns a resolver of cfg.Static and the aliases src lists.
func New(src Source, cfg Config) *Resolver {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Static = maps.Clone(cfg.Static)
	return &Resolver{src: src, cfg: cfg}
}

// Resolve returns the target of alias name, and whether name is an alias.
func (r *Resolver) Resolve(ctx context.Context, name string) (target string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(ctx)
	if target, ok = r.admin[name]; ok {
		return target, true
	}
	target, ok = r.cfg.Static[name]
	return target, ok
}

// List returns every alias in effect, sorted by name.
func (r *Resolver) List(ctx context.Context) []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(ctx)
	out := make([]Entry, 0, len(r.admin)+len(r.cfg.Static))
	for name, target := range r.cfg.Static {
		if _, over := r.admin[name]; !over {
			out = append(out, Entry{Name: name, Target: target, Source: FromConfig})
		}
	}
	for name, target := range r.admin {
		out = append(out, Entry{Name: name, Target: target, Source: FromAdmin})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Invalidate makes the next call reload the store's aliases: the
// replica that changed them sees the change at once.
func (r *Resolver) Invalidate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetched = time.Time{}
}

// refreshLocked reloads the store's aliases when the snapshot is older
// than TTL (or invalidated); on failure it keeps what it has.
func (r *Resolver) refreshLocked(ctx context.Context) {
	now := r.cfg.Now()
	if !r.fetched.IsZero() && now.Sub(r.fetched) < r.cfg.TTL {
		return
	}
	list, err := r.src.ListAliases(ctx)
	if err != nil {
		if r.loaded {
			r.cfg.Logger.Warn("alias refresh failed; serving the previous snapshot", "age", now.Sub(r.good), "err", err)
		} else {
			r.cfg.Logger.Warn("alias load failed; serving the configured aliases only", "err", err)
		}
		r.fetched = now // back off for one TTL
		return
	}
	r.admin = make(map[string]string, len(list))
	for _, a := range list {
		r.admin[a.Name] = a.Target
	}
	r.fetched, r.good, r.loaded = now, now, true
}
