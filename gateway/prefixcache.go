package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/gateway/internal/routing"
	"github.com/warden-ai/warden/internal/cachekey"
)

// indexEntries bounds the routing index (pages of prompts routed to each
// worker): 1<<16 entries of ~100 bytes.
const indexEntries = 1 << 16

// cacheDomains derives each request's prefix-cache domain (DESIGN I3, I8):
// HMAC of a secret only this gateway process holds and the tenant (or, if
// the tenant narrowed it, the API key). Nothing a client sends enters it,
// so no client can choose or widen the set of requests it shares KV
// pages with. The secret is drawn at start-up: a restart or a second
// gateway only shares less, never more. It also keeps the routing index
// of which prompt pages were served where, and the router that scores
// workers by it.
type cacheDomains struct {
	secret []byte
	index  *routing.Index
	router *routing.Router
}

func newCacheDomains() *cacheDomains {
	secret := make([]byte, 32)
	rand.Read(secret) // never fails (crypto/rand)
	ix := routing.NewIndex(indexEntries)
	return &cacheDomains{secret: secret, index: ix, router: routing.Default(ix)}
}

// of returns the domain of a request of p under the tenant's mode, and
// false for no cache.
func (c *cacheDomains) of(p api.Principal, mode cachekey.Mode) (cachekey.Domain, bool) {
	if c == nil {
		return cachekey.Domain{}, false
	}
	return cachekey.Derive(c.secret, mode, p.Tenant, p.KeyID)
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

// pick routes the request: with a cache domain, the worker expected to
// hold most of its prompt pages wins (routing.Default), and the registry's
// order decides between equals; without, the registry's order alone.
func (d *driver) pick(model string, total int64) (registry.Route, error) {
	if !d.cacheOn || d.g.domains == nil {
		return d.g.reg.Pick(model, total)
	}
	req := &routing.Request{Model: model, Domain: d.domain, Cached: true, Prompt: d.prompt}
	d.routeReq = req
	return d.g.reg.PickScored(model, total, func(c registry.Candidate) float64 { return d.g.domains.router.Score(req, c) })
}

// served records that w now holds the request's full prompt pages (a
// both worker sealed them), for later requests of the domain.
func (d *driver) served(w *registry.Worker) {
	if d.routeReq == nil || d.g.domains == nil {
		return
	}
	pt := w.Snapshot().Pool.PageTokens
	all := append(d.prompt[:len(d.prompt):len(d.prompt)], 0) // Hashes drops the last token
	r := &routing.Request{Model: d.routeReq.Model, Domain: d.domain, Cached: true, Prompt: all}
	d.g.domains.index.Record(d.routeReq.Model, w.ID(), r.Hashes(pt))
}

// indexSize exports the routing index's size.
func (c *cacheDomains) indexSize() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warden_gateway_prefix_index_entries",
		Help: "Entries (worker, prompt page) in the gateway's prefix-cache routing index.",
	}, func() float64 { return float64(c.index.Len()) })
}
