package worker

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
)

// generateCached runs a Generate with the cache domain metadata the
// gateway would attach, and returns the outcome and the cached tokens the
// worker reported in its header.
func generateCached(t *testing.T, c controlpb.WorkerClient, domain string, req *controlpb.GenerateRequest) (outcome, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if domain != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, cachekey.MetadataDomain, domain)
	}
	stream, err := c.Generate(ctx, req)
	out := collect(t, stream, err)
	if out.err != nil {
		return out, -1
	}
	md, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Get(cachekey.MetadataCachedTokens)) == 0 {
		return out, 0
	}
	n, err := strconv.Atoi(md.Get(cachekey.MetadataCachedTokens)[0])
	if err != nil {
		t.Fatal(err)
	}
	return out, n
}

func hexDomain(tenant string) string {
	d, _ := cachekey.Derive(bytes.Repeat([]byte("w"), cachekey.MinSecretBytes), cachekey.ModeTenant, cachekey.Scope{Tenant: tenant, Incarnation: "i1"})
	return hex.EncodeToString(d[:])
}

// TestBothReusesPrefixWithinDomain: on a both worker a repeated prompt
// reuses the sealed pages of its domain (and only its domain), the
// answer equals the engine's reference, and cached pages count as
// available.
func TestBothReusesPrefixWithinDomain(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	p := prompt(3*pageTokens+5, 9)
	sp := greedy(6)
	want := runReference(t, [][]int32{p}, sp)[0]
	run := func(domain, req string) int {
		out, cached := generateCached(t, w.client, domain, &controlpb.GenerateRequest{Owner: owner("acme", req, 1), Prompt: p, Sampling: sp})
		checkAgainst(t, req, out, want)
		return cached
	}
	a, b := hexDomain("a"), hexDomain("b")
	for _, c := range []struct {
		domain, req string
		cached      int
	}{
		{a, "a1", 0},
		{a, "a2", 3 * pageTokens},
		{b, "b1", 0}, // another domain: its own copy
		{"", "none", 0},
		{b, "b2", 3 * pageTokens},
	} {
		if got := run(c.domain, c.req); got != c.cached {
			t.Errorf("%s: %d cached tokens, want %d", c.req, got, c.cached)
		}
	}
	waitQuiet(t, w)
	st, err := w.client.Status(context.Background(), &controlpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ps := w.rt.Pool.Stats()
	if ps.Cached != 6 || ps.Seals != 6 || st.GetPool().GetFreePages() != testPages {
		t.Errorf("pool %+v, reported free %d: want two domains' 3 pages cached and all pages available", ps, st.GetPool().GetFreePages())
	}

	// A malformed domain is refused before anything is reserved.
	out, _ := generateCached(t, w.client, "zz", &controlpb.GenerateRequest{Owner: owner("acme", "bad", 1), Prompt: p, Sampling: sp})
	if code(out.err) != codes.InvalidArgument {
		t.Errorf("malformed domain: %v", out.err)
	}
	if got := fmt.Sprint(w.rt.Pool.Stats().Reserved); got != "0" {
		t.Errorf("reserved %s pages for a refused request", got)
	}
}

// TestEvictCacheDomainsRPC: EvictCacheDomains frees one domain's cached
// pages (acknowledged with their count and hashes, counted in the metric,
// reported in PoolStats.cached_pages) and leaves the other domain's; after
// a deletion the domain caches nothing again, and its next request still
// gets the reference's answer. Malformed calls are refused.
func TestEvictCacheDomainsRPC(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	ctx := context.Background()
	p := prompt(3*pageTokens+5, 11)
	sp := greedy(4)
	want := runReference(t, [][]int32{p}, sp)[0]
	run := func(domain, req string) int {
		out, cached := generateCached(t, w.client, domain, &controlpb.GenerateRequest{Owner: owner("acme", req, 1), Prompt: p, Sampling: sp})
		checkAgainst(t, req, out, want)
		return cached
	}
	a, b := hexDomain("a"), hexDomain("b")
	run(a, "a1")
	run(b, "b1")
	waitQuiet(t, w)
	cachedPages := func() int64 {
		st, err := w.client.Status(ctx, &controlpb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetPool().GetCachedPages()
	}
	if n := cachedPages(); n != 6 {
		t.Fatalf("%d cached pages before the eviction, want 3 per domain", n)
	}
	raw, _ := hex.DecodeString(a)
	resp, err := w.client.EvictCacheDomains(ctx, &controlpb.EvictCacheDomainsRequest{Domains: [][]byte{raw}, Reason: controlpb.EvictTenantDeleted})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetFreedPages() != 3 || resp.GetRetiredPages() != 0 || len(resp.GetEvicted().GetEvicted()) != 3 {
		t.Fatalf("acknowledgement %+v, want 3 pages freed and their hashes", resp)
	}
	if n := cachedPages(); n != 3 {
		t.Fatalf("%d cached pages after evicting domain a, want b's 3", n)
	}
	if got := metricValue(t, w.Worker, "warden_kv_prefix_domain_evicted_pages_total", "reason", controlpb.EvictTenantDeleted, "outcome", "freed"); got != 3 {
		t.Fatalf("metric counts %v freed pages, want 3", got)
	}
	if got := run(a, "a2"); got != 0 {
		t.Fatalf("domain a hit %d cached tokens after its eviction", got)
	}
	if got := run(b, "b2"); got != 3*pageTokens {
		t.Fatalf("domain b hit %d cached tokens, want %d", got, 3*pageTokens)
	}
	waitQuiet(t, w)
	if n := cachedPages(); n != 3 {
		t.Fatalf("%d cached pages: the deleted domain cached again", n)
	}
	for name, req := range map[string]*controlpb.EvictCacheDomainsRequest{
		"short domain":   {Domains: [][]byte{raw[:31]}, Reason: controlpb.EvictKeyRevoked},
		"unknown reason": {Domains: [][]byte{raw}, Reason: "because"},
		"too many":       {Domains: make([][]byte, controlpb.MaxEvictDomains+1), Reason: controlpb.EvictKeyRevoked},
	} {
		if _, err := w.client.EvictCacheDomains(ctx, req); code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}
