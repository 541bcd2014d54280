package worker

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"

	"google.golang.org/grpc/metadata"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// cacheDomainFrom reads the domain the gateway attached to ctx; false
// when it attached none.
func cacheDomainFrom(ctx context.Context) (cachekey.Domain, bool, error) {
	vs := metadata.ValueFromIncomingContext(ctx, cachekey.MetadataDomain)
	if len(vs) == 0 {
		return cachekey.Domain{}, false, nil
	}
	var d cachekey.Domain
	if b, err := hex.DecodeString(vs[0]); err != nil || len(b) != len(d) || len(vs) > 1 {
		return cachekey.Domain{}, false, invalid("%s must be one value of %d hex digits", cachekey.MetadataDomain, 2*len(d))
	}
	hex.Decode(d[:], []byte(vs[0]))
	return d, true, nil
}

// prefixCacheEnabled says whether this worker serves from a prefix cache:
// configured on. Both backends know sealed pages (the cuda backend's device
// tag check compares a shared page with the prefix tag the engine computed
// for it).
func (w *Worker) prefixCacheEnabled() bool {
	return w.cfg.Worker.KV.PrefixCache
}

// cacheVersion is the model/format version of this worker's KV: the
// tokenizer, the model's configuration and the page layout. Sealed pages
// are shared only between requests that agree on it.
func (w *Worker) cacheVersion() uint64 {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%+v|%d|%d|%s", w.assets.GetTokenizerSha256(), w.rt.Model.Config,
		w.capacity.PageTokens, w.capacity.PageBytes, w.cfg.Worker.Backend)
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// reportedCacheVersion is the version the worker registers for the
// gateway's hashes (WorkerInfo.prefix_cache_version): 0 without a cache.
func (w *Worker) reportedCacheVersion() uint64 {
	if !w.prefixCacheEnabled() {
		return 0
	}
	return w.version
}

// prefixReport reads the pool's prefix-cache events after cursor c (a
// snapshot for the zero cursor: a registration) for the routing index of
// one gateway, and returns the cursor after them; nil and c without a
// cache. Each gateway has its own cursor, so every gateway's index sees
// every event. The caller keeps the new cursor only once the gateway took
// the report: a heartbeat that fails leads to a registration, whose
// snapshot replaces everything that gateway knew.
func (w *Worker) prefixReport(c kvpool.CacheCursor) (*controlpb.PrefixCacheReport, kvpool.CacheCursor) {
	if !w.prefixCacheEnabled() {
		return nil, c
	}
	ev, next := w.rt.Pool.CacheEventsSince(c)
	r := &controlpb.PrefixCacheReport{Snapshot: ev.Reset}
	for _, h := range ev.Sealed {
		r.Sealed = append(r.Sealed, h[:])
	}
	for _, h := range ev.Evicted {
		r.Evicted = append(r.Evicted, h[:])
	}
	return r, next
}

// prefixFor returns the engine's prefix settings for a Generate on ctx,
// or nil when the request uses no cache.
func (w *Worker) prefixFor(ctx context.Context) (*engine.Prefix, error) {
	d, ok, err := cacheDomainFrom(ctx)
	if err != nil || !ok || !w.prefixCacheEnabled() {
		return nil, err
	}
	return &engine.Prefix{Domain: d, Version: w.version}, nil
}

// reservePrefix is what a decode Reserve looks up in the prefix cache:
// with a cache domain and the prompt's tokens, the engine's prefix
// settings and the chain tags of every full prompt page (decode computes
// no prompt position: the transfer and the first token come from
// prefill, so every full page may be held), under owner's adapter. Nil,
// nil without a cache.
func (w *Worker) reservePrefix(ctx context.Context, owner kvpool.Owner, req *controlpb.ReserveRequest) (*engine.Prefix, []kvpool.Tag, error) {
	px, err := w.prefixFor(ctx)
	prompt := req.GetPrompt()
	switch {
	case err != nil:
		return nil, nil, err
	case len(prompt) == 0:
		return nil, nil, nil
	case int64(len(prompt)) != req.GetPromptTokens():
		return nil, nil, invalid("prompt has %d tokens, prompt_tokens says %d", len(prompt), req.GetPromptTokens())
	case px == nil:
		return nil, nil, nil
	}
	return px, kvpool.Tags(px.Domain, px.Version, owner.Adapter, prompt, w.capacity.PageTokens), nil
}

// prefillTags is what a prefill worker looks up in its own prefix cache
// for prompt under owner's adapter: the tags of the full pages of
// prompt[:len-1] (the last position is always computed: its logits give
// the first token).
func (w *Worker) prefillTags(px *engine.Prefix, owner kvpool.Owner, prompt []int32) []kvpool.Tag {
	if px == nil {
		return nil
	}
	return kvpool.Tags(px.Domain, px.Version, owner.Adapter, prompt[:len(prompt)-1], w.capacity.PageTokens)
}

// Outcomes of warden_kv_prefix_domain_evicted_pages_total.
const (
	evictFreed   = "freed"
	evictRetired = "retired"
)

// evictCacheDomains handles EvictCacheDomains: it drops the named
// domains' sealed pages from the pool (kvpool.EvictDomains: cached ones
// freed, ones running requests read retired; for good, sealing nothing of
// them again, when the tenant was deleted or the key revoked) and
// acknowledges with what it did and the evicted pages' hashes. A worker without a cache holds
// none and answers zero.
func (w *Worker) evictCacheDomains(req *controlpb.EvictCacheDomainsRequest) (*controlpb.EvictCacheDomainsResponse, error) {
	raw, reason := req.GetDomains(), req.GetReason()
	if len(raw) > controlpb.MaxEvictDomains {
		return nil, invalid("%d domains, at most %d in one call", len(raw), controlpb.MaxEvictDomains)
	}
	if !slices.Contains(controlpb.EvictReasons, reason) {
		return nil, invalid("unknown eviction reason %q", reason)
	}
	ds := make([]cachekey.Domain, len(raw))
	for i, b := range raw {
		if len(b) != len(ds[i]) {
			return nil, invalid("domain %d is %d bytes, want %d", i, len(b), len(ds[i]))
		}
		copy(ds[i][:], b)
	}
	final := reason == controlpb.EvictTenantDeleted || reason == controlpb.EvictKeyRevoked
	ev := w.rt.Pool.EvictDomains(ds, final)
	w.metrics.domainEvictions.WithLabelValues(reason, evictFreed).Add(float64(ev.Freed))
	w.metrics.domainEvictions.WithLabelValues(reason, evictRetired).Add(float64(ev.Retired))
	if len(ev.Hashes) > 0 {
		w.log.Info("evicted cache domains", "reason", reason, "domains", len(ds), "freed_pages", ev.Freed, "retired_pages", ev.Retired)
	}
	report := &controlpb.PrefixCacheReport{}
	for _, h := range ev.Hashes[:min(len(ev.Hashes), kvpool.MaxCacheEvents)] {
		report.Evicted = append(report.Evicted, h[:])
	}
	return &controlpb.EvictCacheDomainsResponse{FreedPages: int64(ev.Freed), RetiredPages: int64(ev.Retired), Evicted: report}, nil
}
