package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/domainevict"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/gateway/internal/routing"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
)

// indexEntries bounds the routing index (prefix pages the workers report
// holding): 1<<16 entries of ~100 bytes.
const indexEntries = 1 << 16

// cacheDomains derives each request's prefix-cache domain (DESIGN I3, I8,
// I8a): HMAC of a server-side secret and the tenant (or, if the tenant
// narrowed it, the API key), and the request's LoRA adapter if any. Nothing a client sends enters it, so no client can
// choose or widen the set of requests it shares KV pages with. The secret
// is derived from tenants.key_secret_file when one is set, so that the
// gateway replicas of one fleet (which share that file) and a restarted
// gateway derive the same domains and share the workers' cached pages;
// without the file it is drawn at start-up, and a restart or a second
// gateway only shares less, never more. It also keeps the routing index
// of which prompt pages each worker reports holding, and the router that
// scores workers by it.
type cacheDomains struct {
	secret []byte
	index  *routing.Index
	router *routing.Router
	// roundRobin: gateway.routing is round_robin; router takes the
	// workers in turn for every request.
	roundRobin bool
	log        *slog.Logger
	// Events applied to the index, for the metrics.
	sealed, evicted, snapshots, invalid atomic.Uint64
}

func newCacheDomains(log *slog.Logger, policy config.Routing, keySecret []byte) *cacheDomains {
	c := &cacheDomains{secret: domainSecret(keySecret), index: routing.NewIndex(indexEntries), log: log}
	if policy == config.RoutingRoundRobin {
		c.router, c.roundRobin = routing.RoundRobinRouter(), true
	} else {
		c.router = routing.Default(c.index)
	}
	return c
}

// domainSecret is the secret cache domains are derived under.
func domainSecret(keySecret []byte) []byte {
	return labelledSecret(keySecret, "warden prefix-cache domain secret v1")
}

// labelledSecret is a secret of its own for one use of the API-key
// secret: an HMAC of it under label (so no derived secret reveals another
// or the key secret), or random bytes when there is no key secret.
func labelledSecret(keySecret []byte, label string) []byte {
	if len(keySecret) == 0 {
		secret := make([]byte, 32)
		rand.Read(secret) // never fails (crypto/rand)
		return secret
	}
	m := hmac.New(sha256.New, keySecret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// of returns the domain of a request of p under the tenant's mode and the
// LoRA adapter whose content hash is adapter ("" for the base model), and
// false for no cache.
func (c *cacheDomains) of(p api.Principal, mode cachekey.Mode, adapter string) (cachekey.Domain, bool) {
	if c == nil {
		return cachekey.Domain{}, false
	}
	return cachekey.Derive(c.secret, mode, cachekey.Scope{Tenant: p.Tenant, Incarnation: p.Incarnation, KeyID: p.KeyID, Adapter: adapter})
}

// evictor returns the evictor of these domains (domainevict): it calls
// every worker of reg, within timeout, and the routing index forgets what
// they acknowledge evicting. A tenant's domains include those under each
// adapter of ads it may use (nil: no adapter registry).
func (c *cacheDomains) evictor(reg *registry.Registry, ads *adapters.Registry, timeout time.Duration, log *slog.Logger) *domainevict.Evictor {
	var usable func(ctx context.Context, id string) ([]string, error)
	if ads != nil {
		usable = func(ctx context.Context, id string) ([]string, error) {
			as, err := ads.Usable(ctx, id)
			hashes := make([]string, len(as))
			for i, a := range as {
				hashes[i] = a.Hash
			}
			return hashes, err
		}
	}
	return domainevict.New(domainevict.Config{
		Adapters: usable,
		Workers: func() []domainevict.Worker {
			var out []domainevict.Worker
			for _, s := range reg.Workers() {
				if w, ok := reg.Get(s.ID); ok {
					out = append(out, domainevict.Worker{ID: s.ID, Model: s.Model, Client: w.Client()})
				}
			}
			return out
		},
		Derive: func(mode cachekey.Mode, s cachekey.Scope) (cachekey.Domain, bool) {
			return cachekey.Derive(c.secret, mode, s)
		},
		Forget:  c.report,
		Timeout: timeout,
		Logger:  log,
	})
}

// report folds a worker's prefix-cache report into the routing index
// (registry.Config.PrefixCache). A report that does not decode drops the
// worker's entries: what it holds is unknown until its next snapshot.
func (c *cacheDomains) report(worker, model string, r *controlpb.PrefixCacheReport) {
	ev, err := routing.EventsFromProto(r)
	if err != nil {
		c.invalid.Add(1)
		c.log.Warn("invalid prefix cache report; forgetting the worker's cached pages", "worker", worker, "err", err)
		c.index.Forget(worker)
		return
	}
	c.index.Apply(model, worker, ev)
	c.sealed.Add(uint64(len(ev.Sealed)))
	c.evicted.Add(uint64(len(ev.Evicted)))
	if ev.Snapshot {
		c.snapshots.Add(1)
	}
}

// domainHex is the request's domain as a worker receives it
// (cachekey.MetadataDomain), or "" without a cache.
func (d *driver) domainHex() string {
	if !d.cacheOn {
		return ""
	}
	return hex.EncodeToString(d.domain[:])
}

// withDomain returns ctx carrying the request's domain to a worker
// (cachekey.MetadataDomain), or ctx itself without a cache.
func (d *driver) withDomain(ctx context.Context) context.Context {
	if !d.cacheOn {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, cachekey.MetadataDomain, d.domainHex())
}

// cachePrompt is the prompt a decode Reserve carries to look up the
// pages it holds (ReserveRequest.prompt), or nil without a cache.
func (d *driver) cachePrompt() []int32 {
	if !d.cacheOn {
		return nil
	}
	return d.prompt
}

// pick routes the request: with a cache domain or a LoRA adapter, the
// workers are scored by routing.Default (saturated workers aside unless
// they hold the prefix with a short queue, and those without room for the
// adapter; expected prefix hit, load, free pages, holding the adapter) and the
// registry's order decides between equals; without, the registry's order
// alone. Under gateway.routing round_robin every request takes the
// workers in turn. A decode worker whose budget is used up but that the
// router admits (a holder, routing.HolderQueue) takes the request now.
func (d *driver) pick(model string, total int64) (registry.Route, error) {
	c := d.g.domains
	if c == nil || (!d.cacheOn && !c.roundRobin && d.adapter == nil) {
		return d.g.reg.Pick(model, total)
	}
	req := &routing.Request{Model: model, Domain: d.domain, Cached: d.cacheOn, Prompt: d.prompt}
	if d.adapter != nil {
		req.Adapter, req.AdapterBytes = d.adapter.Hash, d.adapter.Bytes
	}
	rt, err := d.g.reg.PickScored(model, total, func(cand registry.Candidate) float64 { return c.router.Score(req, cand) })
	if err == nil && rt.Busy && c.router.Admits(req, rt.Decode.Candidate()) {
		rt.Busy = false
	}
	return rt, err
}

// Describe implements prometheus.Collector.
func (c *cacheDomains) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

var (
	indexEntriesDesc = prometheus.NewDesc("warden_gateway_prefix_index_entries",
		"Entries (worker, prompt page) in the gateway's prefix-cache routing index, as the workers reported them.", nil, nil)
	indexEventsDesc = prometheus.NewDesc("warden_gateway_prefix_index_events_total",
		"Prefix-cache events the workers reported to the routing index, by event: sealed and evicted pages, snapshots (a registration, or a report that overflowed), invalid reports, and dropped (entries the index's bound pushed out).",
		[]string{"event"}, nil)
)

// Collect implements prometheus.Collector: the routing index's size and
// the events applied to it.
func (c *cacheDomains) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(indexEntriesDesc, prometheus.GaugeValue, float64(c.index.Len()))
	for _, e := range []struct {
		name string
		n    uint64
	}{
		{"sealed", c.sealed.Load()}, {"evicted", c.evicted.Load()}, {"snapshot", c.snapshots.Load()},
		{"invalid", c.invalid.Load()}, {"dropped", c.index.Dropped()},
	} {
		ch <- prometheus.MustNewConstMetric(indexEventsDesc, prometheus.CounterValue, float64(e.n), e.name)
	}
}
