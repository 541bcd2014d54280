package domainevict

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
)

// Outcomes of warden_gateway_cache_domain_evictions_total.
const (
	OutcomeAcked  = "acked"
	OutcomeFailed = "failed"
)

// Worker is one registered worker an eviction goes to.
type Worker struct {
	ID, Model string
	Client    controlpb.WorkerClient
}

// Config configures an Evictor.
type Config struct {
	// Workers lists the workers to call.
	Workers func() []Worker
	// Derive derives a domain (cachekey.Derive under the gateway's
	// secret); false when the scope has none.
	Derive func(mode cachekey.Mode, s cachekey.Scope) (cachekey.Domain, bool)
	// Adapters lists the content hashes (lora.Hash) of the LoRA adapters
	// tenant id's requests may have run under: its own and those shared
	// with it. Each has its own domains (cachekey.Scope.Adapter, DESIGN
	// I8a), evicted with the tenant's. Nil: no adapters (no registry).
	Adapters func(ctx context.Context, id string) ([]string, error)
	// Forget applies a worker's acknowledged evictions to the routing
	// index (a report with evicted hashes only).
	Forget func(worker, model string, r *controlpb.PrefixCacheReport)
	// Timeout bounds the calls of one eviction.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Evictor fans evictions out to the workers. Create it with New.
type Evictor struct {
	cfg   Config
	calls *prometheus.CounterVec // reason, outcome
}

// New returns an Evictor; register it as a prometheus.Collector.
func New(cfg Config) *Evictor {
	e := &Evictor{cfg: cfg, calls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warden_gateway_cache_domain_evictions_total",
		Help: "EvictCacheDomains calls to workers, by reason (tenant_deleted, tenant_disabled, key_revoked, " +
			"prefix_cache_changed, adapter_removed) and outcome (acked: the worker evicted the domains' pages; failed: it was not reached).",
	}, []string{"reason", "outcome"})}
	for _, r := range controlpb.EvictReasons {
		for _, o := range []string{OutcomeAcked, OutcomeFailed} {
			e.calls.WithLabelValues(r, o)
		}
	}
	return e
}

// Describe implements prometheus.Collector.
func (e *Evictor) Describe(ch chan<- *prometheus.Desc) { e.calls.Describe(ch) }

// Collect implements prometheus.Collector.
func (e *Evictor) Collect(ch chan<- prometheus.Metric) { e.calls.Collect(ch) }

// tenantDomains is every domain a tenant's requests may have used: the
// tenant domain and the per-key domain of each of keyIDs, all of
// incarnation inc, on the base model and under each adapter the tenant
// may use (Config.Adapters). Evicting them all covers whichever mode the
// tenant had when its pages were sealed. An adapter list that cannot be
// read leaves the adapters' domains to age out, unreachable by any later
// request all the same (they derive from the incarnation).
func (e *Evictor) tenantDomains(ctx context.Context, id, inc string, keyIDs []string) []cachekey.Domain {
	var ds []cachekey.Domain
	for _, a := range e.adapters(ctx, id) {
		ds = append(ds, e.scopeDomains(id, inc, keyIDs, a)...)
	}
	return ds
}

// keyDomains is the per-key domain of keyID of tenant id at incarnation
// inc, on the base model and under each adapter the tenant may use.
func (e *Evictor) keyDomains(ctx context.Context, id, inc, keyID string) []cachekey.Domain {
	var ds []cachekey.Domain
	for _, a := range e.adapters(ctx, id) {
		if d, ok := e.cfg.Derive(cachekey.ModeKey, cachekey.Scope{Tenant: id, Incarnation: inc, KeyID: keyID, Adapter: a}); ok {
			ds = append(ds, d)
		}
	}
	return ds
}

// adapters is "" (the base model) and the adapters tenant id may use.
func (e *Evictor) adapters(ctx context.Context, id string) []string {
	out := []string{""}
	if e.cfg.Adapters == nil {
		return out
	}
	more, err := e.cfg.Adapters(ctx, id)
	if err != nil {
		e.cfg.Logger.Warn("listing the tenant's adapters failed; their cache domains age out instead", "tenant", id, "err", err)
	}
	return append(out, more...)
}

// scopeDomains is the tenant domain and the per-key domain of each of
// keyIDs of tenant id at incarnation inc, under adapter ("" for the base
// model).
func (e *Evictor) scopeDomains(id, inc string, keyIDs []string, adapter string) []cachekey.Domain {
	var ds []cachekey.Domain
	if d, ok := e.cfg.Derive(cachekey.ModeTenant, cachekey.Scope{Tenant: id, Incarnation: inc, Adapter: adapter}); ok {
		ds = append(ds, d)
	}
	for _, k := range keyIDs {
		if d, ok := e.cfg.Derive(cachekey.ModeKey, cachekey.Scope{Tenant: id, Incarnation: inc, KeyID: k, Adapter: adapter}); ok {
			ds = append(ds, d)
		}
	}
	return ds
}

// Evict calls EvictCacheDomains with ds on every worker, in parallel,
// and waits for every answer or the timeout. Acknowledged evictions are
// forgotten by the routing index. It returns how many workers
// acknowledged and how many failed. The calls are not cancelled with
// ctx: an eviction started completes.
func (e *Evictor) Evict(ctx context.Context, reason string, ds []cachekey.Domain) (acked, failed int) {
	if len(ds) == 0 {
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
	defer cancel()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, w := range e.cfg.Workers() {
		wg.Go(func() {
			err := e.evictOn(ctx, w, reason, ds)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				e.calls.WithLabelValues(reason, OutcomeFailed).Inc()
				e.cfg.Logger.Warn("cache domain eviction not acknowledged; the worker keeps the pages until they age out, unreachable by any new request",
					"worker", w.ID, "reason", reason, "err", err)
				return
			}
			acked++
			e.calls.WithLabelValues(reason, OutcomeAcked).Inc()
		})
	}
	wg.Wait()
	return acked, failed
}

// evictOn sends ds to one worker, in calls of at most
// controlpb.MaxEvictDomains domains.
func (e *Evictor) evictOn(ctx context.Context, w Worker, reason string, ds []cachekey.Domain) error {
	for start := 0; start < len(ds); start += controlpb.MaxEvictDomains {
		req := &controlpb.EvictCacheDomainsRequest{Reason: reason}
		for _, d := range ds[start:min(len(ds), start+controlpb.MaxEvictDomains)] {
			req.Domains = append(req.Domains, d[:])
		}
		resp, err := w.Client.EvictCacheDomains(ctx, req)
		if err != nil {
			return err
		}
		if r := resp.GetEvicted(); len(r.GetEvicted()) > 0 {
			e.cfg.Forget(w.ID, w.Model, r)
		}
	}
	return nil
}
