package storetest

import (
	"bytes"
	"reflect"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/tenant"
)

// adapterStores returns both handles as AdapterStores, or skips a store
// that does not implement the optional interface.
func (e *env) adapterStores() (a, b tenant.AdapterStore) {
	a, okA := e.a.(tenant.AdapterStore)
	b, okB := e.b.(tenant.AdapterStore)
	if !okA || !okB {
		e.t.Skip("the store holds no adapters (tenant.AdapterStore)")
	}
	return a, b
}

// testAdapterFiles returns an adapter record of owner for name on base
// "m" and its files; big makes the weights span several chunks.
func testAdapterFiles(name, owner string, seed byte, big bool) (tenant.Adapter, []byte, []byte) {
	cfg := []byte(`{"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":["q_proj"],"seed":` + string('0'+seed) + `}`)
	n := 1000
	if big {
		n = 2*tenant.AdapterChunkBytes + 12345
	}
	w := make([]byte, n)
	for i := range w {
		w[i] = byte(i*7) ^ seed
	}
	return tenant.Adapter{Name: tenant.AdapterName("m", name), BaseModel: "m", Owner: owner, Hash: lora.Hash(cfg, w),
		Bytes: 4096, Rank: 4, Targets: []string{"q_proj"}}, cfg, w
}

func (e *env) wantFiles(s tenant.AdapterStore, hash string, cfg, w []byte) {
	e.t.Helper()
	gc, gw, err := s.AdapterFiles(e.ctx, hash)
	if err != nil || !bytes.Equal(gc, cfg) || !bytes.Equal(gw, w) {
		e.t.Fatalf("AdapterFiles(%s) = %d+%d bytes, %v; want the %d+%d bytes stored", hash, len(gc), len(gw), err, len(cfg), len(w))
	}
}

func testAdapters(e *env) {
	t := e.t
	a, b := e.adapterStores()
	e.create(e.a, tenant.Tenant{ID: "acme"})
	e.create(e.a, tenant.Tenant{ID: "beta"})
	if l, err := a.ListAdapters(e.ctx); err != nil || len(l) != 0 {
		t.Fatalf("ListAdapters on an empty store = %+v, %v", l, err)
	}
	big, bigCfg, bigW := testAdapterFiles("big", "acme", 1, true)
	got, err := a.PutAdapter(e.ctx, big, bigCfg, bigW)
	if err != nil {
		t.Fatal(err)
	}
	want := big
	want.CreatedAt = e.clock.Now().UTC()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PutAdapter = %+v, want %+v", got, want)
	}
	if g, err := b.GetAdapter(e.ctx, big.Name); err != nil || !g.CreatedAt.Equal(want.CreatedAt) || g.Hash != big.Hash || g.Owner != "acme" {
		t.Fatalf("GetAdapter on the replica = %+v, %v; want %+v", g, err, want)
	}
	e.wantFiles(b, big.Hash, bigCfg, bigW) // over two chunks

	_, err = b.PutAdapter(e.ctx, big, bigCfg, bigW)
	wantErr(t, "PutAdapter of a taken name", err, tenant.ErrExists, big.Name)
	bad := big
	bad.Name = "m:other"
	_, err = a.PutAdapter(e.ctx, bad, bigCfg, bigW[1:])
	wantErr(t, "PutAdapter with files of another hash", err, tenant.ErrInvalid, "hash")
	bad.Owner = "ghost"
	_, err = a.PutAdapter(e.ctx, bad, bigCfg, bigW)
	wantErr(t, "PutAdapter for a missing owner", err, tenant.ErrNotFound, "ghost")
	bad.Owner, bad.SharedWith = "acme", []string{"ghost"}
	_, err = a.PutAdapter(e.ctx, bad, bigCfg, bigW)
	wantErr(t, "PutAdapter shared with a missing tenant", err, tenant.ErrNotFound, "ghost")
	bad.SharedWith, bad.Name = nil, "n:x"
	_, err = a.PutAdapter(e.ctx, bad, bigCfg, bigW)
	wantErr(t, "PutAdapter named for another base", err, tenant.ErrInvalid, "m:")
	if _, err := a.GetAdapter(e.ctx, "m:other"); err == nil {
		t.Fatal("a refused PutAdapter stored its record")
	}

	// A second name on the same files: they stay until both are gone.
	twin := big
	twin.Name, twin.Owner = "m:twin", "beta"
	if _, err := b.PutAdapter(e.ctx, twin, bigCfg, bigW); err != nil {
		t.Fatal(err)
	}
	small, smallCfg, smallW := testAdapterFiles("small", "acme", 2, false)
	small.SharedWith = []string{"beta"}
	if _, err := a.PutAdapter(e.ctx, small, smallCfg, smallW); err != nil {
		t.Fatal(err)
	}
	l, err := b.ListAdapters(e.ctx)
	if err != nil || len(l) != 3 || l[0].Name != "m:big" || l[1].Name != "m:small" || l[2].Name != "m:twin" {
		t.Fatalf("ListAdapters = %+v, %v; want m:big, m:small, m:twin", l, err)
	}
	if !l[1].MayUse("beta") || !l[1].MayUse("acme") || l[0].MayUse("beta") {
		t.Fatalf("MayUse: small shared with beta %v, owner %v; big not shared %v", l[1].MayUse("beta"), l[1].MayUse("acme"), l[0].MayUse("beta"))
	}

	// Update replaces the shares and the pin only.
	up := small
	up.SharedWith, up.Pinned, up.Owner, up.Hash = nil, true, "beta", big.Hash
	u, err := b.UpdateAdapter(e.ctx, up)
	if err != nil || u.Owner != "acme" || u.Hash != small.Hash || !u.Pinned || len(u.SharedWith) != 0 {
		t.Fatalf("UpdateAdapter = %+v, %v; want acme's unshared pinned adapter of hash %s", u, err, small.Hash)
	}
	if g, _ := a.GetAdapter(e.ctx, small.Name); g.MayUse("beta") || !g.Pinned {
		t.Fatalf("after UpdateAdapter: %+v", g)
	}
	up.SharedWith = []string{"ghost"}
	_, err = a.UpdateAdapter(e.ctx, up)
	wantErr(t, "UpdateAdapter sharing with a missing tenant", err, tenant.ErrNotFound, "ghost")
	up.Name = "m:none"
	_, err = a.UpdateAdapter(e.ctx, up)
	wantErr(t, "UpdateAdapter of a missing adapter", err, tenant.ErrNotFound, "m:none")

	if err := a.DeleteAdapter(e.ctx, big.Name); err != nil {
		t.Fatal(err)
	}
	e.wantFiles(b, big.Hash, bigCfg, bigW) // m:twin still names them
	wantErr(t, "DeleteAdapter twice", b.DeleteAdapter(e.ctx, big.Name), tenant.ErrNotFound, big.Name)
	if err := b.DeleteAdapter(e.ctx, twin.Name); err != nil {
		t.Fatal(err)
	}
	_, _, err = a.AdapterFiles(e.ctx, big.Hash)
	wantErr(t, "AdapterFiles after the last name's deletion", err, tenant.ErrNotFound)
	e.wantFiles(a, small.Hash, smallCfg, smallW)
}

// testAdapterTenantDeletion: deleting a tenant deletes its adapters and
// withdraws its shares; the re-created tenant inherits nothing.
func testAdapterTenantDeletion(e *env) {
	t := e.t
	a, b := e.adapterStores()
	e.create(e.a, tenant.Tenant{ID: "acme"})
	e.create(e.a, tenant.Tenant{ID: "beta"})
	own, cfg, w := testAdapterFiles("own", "acme", 3, false)
	shared, scfg, sw := testAdapterFiles("shared", "beta", 4, false)
	shared.SharedWith = []string{"acme"}
	for _, p := range []struct {
		a      tenant.Adapter
		cfg, w []byte
	}{{own, cfg, w}, {shared, scfg, sw}} {
		if _, err := a.PutAdapter(e.ctx, p.a, p.cfg, p.w); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.b.DeleteTenant(e.ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	_, err := b.GetAdapter(e.ctx, own.Name)
	wantErr(t, "GetAdapter of a deleted tenant's adapter", err, tenant.ErrNotFound)
	_, _, err = b.AdapterFiles(e.ctx, own.Hash)
	wantErr(t, "AdapterFiles of a deleted tenant's adapter", err, tenant.ErrNotFound)
	e.create(e.a, tenant.Tenant{ID: "acme"})
	g, err := a.GetAdapter(e.ctx, shared.Name)
	if err != nil || g.MayUse("acme") || !g.MayUse("beta") {
		t.Fatalf("beta's adapter once shared with the deleted acme = %+v, %v; want beta's alone", g, err)
	}
}

// testUsageModel: a request admitted against one model's limits records
// its usage under AcquireRequest.UsageModel.
func testUsageModel(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{AllowedModels: []string{"m"}}})
	l := e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m", UsageModel: "m:ad", Tokens: 10})
	if l.Info().Model != "m:ad" {
		t.Fatalf("lease model %q, want m:ad", l.Info().Model)
	}
	e.release(l, 3, 4)
	u, err := e.b.Usage(e.ctx, "acme", e.clock.Now(), e.clock.Now())
	if err != nil || len(u) != 1 || u[0].Model != "m:ad" || u[0].PromptTokens != 3 || u[0].CompletionTokens != 4 {
		t.Fatalf("Usage = %+v, %v; want 3+4 tokens under m:ad", u, err)
	}
	_, err = e.a.Acquire(e.ctx, "acme", tenant.AcquireRequest{Model: "m2", UsageModel: "m:ad"})
	wantErr(t, "Acquire for a model not allowed, usage under an allowed-looking name", err, tenant.ErrModelNotAllowed)
}
