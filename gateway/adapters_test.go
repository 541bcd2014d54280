package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker/model"
)

// testAdapterFiles draws a LoRA adapter for the fakes' model (q and v,
// rank 128: 2 MiB of weights, three LoadAdapter parts).
func testAdapterFiles(t testing.TB, seed uint64) (configJSON, weights []byte) {
	t.Helper()
	cfg, w, err := lora.Random(shapeConfig(fakeShape), lora.Config{Rank: 128, Alpha: 16, Targets: []lora.Module{lora.Q, lora.V}}, 0.01, seed)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, w
}

// realAdapterFiles draws a LoRA adapter for the real workers' model
// (every projection, rank 4) and returns its files and its parsed form,
// which the float64 reference merges.
func realAdapterFiles(t testing.TB, seed uint64) (configJSON, weights []byte, parsed *lora.Adapter) {
	t.Helper()
	mc, err := model.LoadModelConfig(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	if configJSON, weights, err = lora.Random(&mc, lora.Config{Rank: 4, Alpha: 8, Targets: lora.Modules[:]}, 0.12, seed); err != nil {
		t.Fatal(err)
	}
	if parsed, err = lora.Parse(configJSON, weights, &mc); err != nil {
		t.Fatal(err)
	}
	return configJSON, weights, parsed
}

// registerAdapter registers tiny:<name> for owner through the registry.
func registerAdapter(t testing.TB, tg *testGateway, name, owner string, seed uint64) (tenant.Adapter, []byte, []byte) {
	t.Helper()
	cfg, w := testAdapterFiles(t, seed)
	a, err := tg.adapters.Register(t.Context(), adapters.Upload{Base: "tiny", Name: name, Owner: owner, ConfigJSON: cfg, Weights: w})
	if err != nil {
		t.Fatal(err)
	}
	return a, cfg, w
}

// as returns tg authenticating as a new tenant id.
func (tg *testGateway) as(id string) *testGateway {
	tg.t.Helper()
	if _, err := tg.Store().CreateTenant(tg.t.Context(), tenant.Tenant{ID: id}); err != nil {
		tg.t.Fatal(err)
	}
	other := *tg
	var err error
	if other.key, _, err = tg.Store().IssueKey(tg.t.Context(), id, "test"); err != nil {
		tg.t.Fatal(err)
	}
	return &other
}

func adapterChat(model string) map[string]any {
	return map[string]any{"model": model, "max_tokens": 100, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}}}
}

// wantPushed checks that w received exactly one LoadAdapter of a, with
// the files' exact bytes.
func wantPushed(t *testing.T, w *fakeWorker, a tenant.Adapter, cfg, weights []byte) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.loads) != 1 {
		t.Fatalf("worker %s received %d LoadAdapter streams, want 1", w.id, len(w.loads))
	}
	l := w.loads[0]
	if r := l.first.GetRef(); r.GetName() != "tiny:ad" || r.GetHash() != a.Hash || l.first.GetPin() ||
		!bytes.Equal(l.first.GetConfigJson(), cfg) || !bytes.Equal(l.weights, weights) || l.first.GetWeightsSize() != int64(len(weights)) {
		t.Fatalf("LoadAdapter on %s: ref %v pin %v config %d bytes, weights %d of %d bytes; want %s's files (%d, %d bytes)",
			w.id, r, l.first.GetPin(), len(l.first.GetConfigJson()), len(l.weights), l.first.GetWeightsSize(), a.Hash, len(cfg), len(weights))
	}
	if want := (len(weights) + adapters.ChunkBytes - 1) / adapters.ChunkBytes; l.parts != want {
		t.Errorf("LoadAdapter sent %d parts, want %d of at most %d bytes", l.parts, want, adapters.ChunkBytes)
	}
}

// TestAdapterSingle: tenant acme's request for its adapter reaches the
// worker with the adapter's ref and owner.adapter; the worker that does
// not hold it refuses, receives the files by LoadAdapter, and serves the
// request placed again. Usage is recorded under the adapter's name.
// Tenant beta, not shared with, gets exactly the 404 of a missing model,
// and /v1/models lists the adapter for acme only.
func TestAdapterSingle(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.adapters = map[string]bool{}
	w.start()
	a, cfg, weights := registerAdapter(t, tg, "ad", "acme", 1)

	status, _, body := tg.post("/v1/chat/completions", adapterChat("tiny:ad"))
	var resp struct {
		Model   string
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil || len(resp.Choices) != 1 {
		t.Fatalf("acme's chat with its adapter: %d %s", status, body)
	}
	if resp.Model != "tiny:ad" || resp.Choices[0].Message.Content != fakeReply {
		t.Fatalf("reply model %q content %q, want tiny:ad, %q", resp.Model, resp.Choices[0].Message.Content, fakeReply)
	}
	wantPushed(t, w, a, cfg, weights)
	w.mu.Lock()
	refusals := strings.Join(w.refusals, ",")
	w.mu.Unlock()
	if refusals != "Generate "+a.Hash {
		t.Fatalf("refusals %q, want the first Generate only", refusals)
	}
	// The fake refuses a call whose owner.adapter is not its ref's hash.
	if s := tg.only(); s.Model != "tiny" {
		t.Fatalf("request ran on model %q, want the base tiny", s.Model)
	}
	// The Responses API resolves it alike (the worker holds it now).
	status, _, body = tg.post("/v1/responses", map[string]any{"model": "tiny:ad", "input": "Say hello.", "max_output_tokens": 100})
	if status != 200 || !strings.Contains(string(body), `"model":"tiny:ad"`) || !strings.Contains(string(body), `"text":"`+fakeReply+`"`) {
		t.Fatalf("acme's response with its adapter: %d %s", status, body)
	}
	// /tokenize of an adapter tokenizes as its base.
	_, _, viaAdapter := tg.post("/tokenize", map[string]any{"model": "tiny:ad", "prompt": "Say hello."})
	_, _, viaBase := tg.post("/tokenize", map[string]any{"model": "tiny", "prompt": "Say hello."})
	if !strings.Contains(string(viaAdapter), `"tokens":[`) || string(viaAdapter) != string(viaBase) {
		t.Fatalf("/tokenize of tiny:ad: %s\nof tiny: %s", viaAdapter, viaBase)
	}
	now := time.Now()
	u, err := tg.Store().Usage(t.Context(), "acme", now, now)
	if err != nil || len(u) != 2 || u[1].Model != "tiny:ad" || u[1].Requests != 3 || u[0].Model != "tiny" || u[0].Requests != 1 {
		t.Fatalf("acme's usage %+v, %v; want its 3 requests of tiny:ad under it, 1 under tiny", u, err)
	}

	beta := tg.as("beta")
	s1, _, forbidden := beta.post("/v1/chat/completions", adapterChat("tiny:ad"))
	s2, _, missing := beta.post("/v1/chat/completions", adapterChat("tiny:nope"))
	if s1 != 404 || s2 != 404 || string(forbidden) != strings.ReplaceAll(string(missing), "tiny:nope", "tiny:ad") {
		t.Fatalf("beta's request for acme's adapter: %d %s\nfor a missing one: %d %s\nwant the same 404", s1, forbidden, s2, missing)
	}
	if e := decodeEnvelope(t, forbidden); e.Error.Code == nil || *e.Error.Code != "model_not_found" {
		t.Fatalf("beta's 404: %s", forbidden)
	}

	models := func(tg *testGateway) map[string]string {
		status, body := tg.get("/v1/models")
		var l struct {
			Data []struct{ ID, Parent string }
		}
		if err := json.Unmarshal(body, &l); status != 200 || err != nil {
			t.Fatalf("/v1/models: %d %s", status, body)
		}
		out := map[string]string{}
		for _, m := range l.Data {
			out[m.ID] = m.Parent
		}
		return out
	}
	if m := models(tg); len(m) != 2 || m["tiny"] != "" || m["tiny:ad"] != "tiny" {
		t.Fatalf("acme's /v1/models %v, want tiny and tiny:ad (parent tiny)", m)
	}
	if m := models(beta); len(m) != 1 || m["tiny"] != "" {
		t.Fatalf("beta's /v1/models %v, want tiny alone", m)
	}
	s3, b3 := beta.get("/v1/models/tiny:ad")
	s4, b4 := beta.get("/v1/models/tiny:nope")
	if s3 != 404 || s4 != 404 || string(b3) != strings.ReplaceAll(string(b4), "tiny:nope", "tiny:ad") {
		t.Fatalf("beta's GET /v1/models/tiny:ad: %d %s; of a missing model: %d %s", s3, b3, s4, b4)
	}
}

// TestAdapterPrefillDecode: in P/D, decode's Reserve and prefill's
// Prefill each refuse the adapter once; each worker receives it and the
// call is made again; every call carries the ref and owner.adapter.
func TestAdapterPrefillDecode(t *testing.T) {
	tg := startGateway(t, testConfig())
	fab := &fabric{}
	decode := newFake(tg, controlpb.Role_ROLE_DECODE, 256, fab)
	prefill := newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab)
	decode.adapters, prefill.adapters = map[string]bool{}, map[string]bool{}
	decode.start()
	prefill.start()
	a, cfg, weights := registerAdapter(t, tg, "ad", "acme", 2)
	status, _, body := tg.post("/v1/chat/completions", adapterChat("tiny:ad"))
	if status != 200 || !strings.Contains(string(body), `"content":"`+fakeReply+`"`) {
		t.Fatalf("P/D chat with the adapter: %d %s", status, body)
	}
	wantPushed(t, decode, a, cfg, weights)
	wantPushed(t, prefill, a, cfg, weights)
	var order []string
	for _, c := range decode.requestCalls() {
		order = append(order, c.method)
	}
	if strings.Join(order, ",") != "Reserve,Reserve,Generate" || strings.Join(decode.refusals, ",") != "Reserve "+a.Hash {
		t.Errorf("decode calls %v, refusals %v; want Reserve refused, Reserve, Generate", order, decode.refusals)
	}
	if strings.Join(prefill.refusals, ",") != "Prefill "+a.Hash || len(prefill.requestCalls()) != 2 {
		t.Errorf("prefill calls %+v, refusals %v; want Prefill refused then served", prefill.requestCalls(), prefill.refusals)
	}
}

// TestAdapterRegisterChecksShape: an adapter whose tensors do not fit the
// base model's shape is refused with lora's reason.
func TestAdapterRegisterChecksShape(t *testing.T) {
	tg := startGateway(t, testConfig())
	newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	other := shapeConfig(fakeShape)
	other.HiddenSize = 256
	cfg, w, err := lora.Random(other, lora.Config{Rank: 4, Alpha: 8, Targets: []lora.Module{lora.Q}}, 0.01, 3)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tg.adapters.Register(context.Background(), adapters.Upload{Base: "tiny", Name: "x", Owner: "acme", ConfigJSON: cfg, Weights: w})
	if err == nil || !strings.Contains(err.Error(), "has shape [4 256], want [4 512]") {
		t.Fatalf("Register of an adapter for another shape: %v", err)
	}
	_, err = tg.adapters.Register(context.Background(), adapters.Upload{Base: "other", Name: "x", Owner: "acme", ConfigJSON: cfg, Weights: w})
	if err == nil || !strings.Contains(err.Error(), `no worker serving "other" has registered`) {
		t.Fatalf("Register on an unserved base: %v", err)
	}
}

// setAdapterMemory makes w's heartbeats report m and waits until the
// gateway has it.
func setAdapterMemory(t *testing.T, tg *testGateway, w *fakeWorker, m *controlpb.AdapterMemory) {
	t.Helper()
	w.mu.Lock()
	w.adapterMem = m
	for _, h := range m.Loaded {
		w.adapters[h] = true
	}
	w.mu.Unlock()
	waitFor(t, w.id+"'s adapter memory at the gateway", func() bool {
		rw, ok := tg.reg.Get(w.id)
		if !ok {
			return false
		}
		got := rw.Snapshot().Adapters
		return got.Reported && got.Capacity == m.CapacityBytes && got.Used == m.UsedBytes && len(got.Loaded) == len(m.Loaded) &&
			len(got.Pinned) == len(m.Pinned)
	})
}

// TestAdapterRouting: placement prefers the worker holding the adapter
// (no load needed), and leaves out one whose adapter memory has no room
// for it.
func TestAdapterRouting(t *testing.T) {
	tg := startGateway(t, testConfig())
	holder, other := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil), newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	holder.adapters, other.adapters = map[string]bool{}, map[string]bool{}
	holder.start()
	other.start()
	a, _, _ := registerAdapter(t, tg, "ad", "acme", 4)
	setAdapterMemory(t, tg, holder, &controlpb.AdapterMemory{CapacityBytes: 64 << 20, UsedBytes: a.Bytes, Loaded: []string{a.Hash}})
	setAdapterMemory(t, tg, other, &controlpb.AdapterMemory{CapacityBytes: 64 << 20})
	// The admin API's worker view (what warden check prints) shows it.
	if status, body := tg.admin("GET", "/admin/v1/workers"); status != 200 ||
		!strings.Contains(string(body), `"adapters":{"capacity_bytes":67108864,"used_bytes":`+strconv.FormatInt(a.Bytes, 10)+`,"loaded":["`+a.Hash+`"],"pinned":null}`) {
		t.Fatalf("admin workers view: %d %s", status, body)
	}
	for range 3 {
		if status, _, body := tg.post("/v1/chat/completions", adapterChat("tiny:ad")); status != 200 {
			t.Fatalf("chat: %d %s", status, body)
		}
	}
	if n, m := len(holder.requestCalls()), len(other.requestCalls()); n != 3 || m != 0 {
		t.Fatalf("holder served %d requests, the other %d; want all 3 on the holder", n, m)
	}
	if len(holder.loads)+len(other.loads) != 0 {
		t.Fatalf("adapter loaded %d+%d times, want never", len(holder.loads), len(other.loads))
	}

	// Nobody holds it now: the worker whose memory is full of pinned
	// adapters is left out, the other one receives it.
	b, cfgB, weightsB := registerAdapter(t, tg, "ad2", "acme", 5)
	setAdapterMemory(t, tg, holder, &controlpb.AdapterMemory{CapacityBytes: 64 << 20, UsedBytes: 64<<20 - b.Bytes/2,
		Loaded: []string{a.Hash}, Pinned: []string{a.Hash}})
	if status, _, body := tg.post("/v1/chat/completions", adapterChat("tiny:ad2")); status != 200 {
		t.Fatalf("chat with tiny:ad2: %d %s", status, body)
	}
	if len(holder.loads) != 0 || len(other.requestCalls()) != 2 {
		t.Fatalf("full worker received %d loads; the other %d calls, want the refused Generate and its retry", len(holder.loads), len(other.requestCalls()))
	}
	other.mu.Lock()
	defer other.mu.Unlock()
	if len(other.loads) != 1 || !bytes.Equal(other.loads[0].weights, weightsB) || !bytes.Equal(other.loads[0].first.GetConfigJson(), cfgB) {
		t.Fatalf("the worker with room received %d loads, want tiny:ad2's files", len(other.loads))
	}
}

// TestAdapterLimitsAliasesAndNoRoom: a tenant's allowed_models entry for
// the base covers its adapters (and one without it gets the 404 of a
// missing model); an alias may name an adapter; a worker without room
// for it fails the request with a 503 to retry.
func TestAdapterLimitsAliasesAndNoRoom(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.adapters = map[string]bool{}
	w.start()
	registerAdapter(t, tg, "ad", "acme", 6)
	ctx := t.Context()
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{AllowedModels: []string{"tiny"}}}); err != nil {
		t.Fatal(err)
	}
	if status, _, body := tg.post("/v1/chat/completions", adapterChat("tiny:ad")); status != 200 {
		t.Fatalf("allowed tiny, chat with tiny:ad: %d %s", status, body)
	}
	if err := tg.Store().SetAlias(ctx, tenant.Alias{Name: "support", Target: "tiny:ad"}); err != nil {
		t.Fatal(err)
	}
	tg.aliases.Invalidate()
	status, _, body := tg.post("/v1/chat/completions", adapterChat("support"))
	if status != 200 || !strings.Contains(string(body), `"model":"tiny:ad"`) {
		t.Fatalf("chat with the alias of tiny:ad: %d %s", status, body)
	}
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{AllowedModels: []string{"other"}}}); err != nil {
		t.Fatal(err)
	}
	s1, _, denied := tg.post("/v1/chat/completions", adapterChat("tiny:ad"))
	s2, _, missing := tg.post("/v1/chat/completions", adapterChat("tiny:nope"))
	if s1 != 404 || s2 != 404 || string(denied) != strings.ReplaceAll(string(missing), "tiny:nope", "tiny:ad") {
		t.Fatalf("not allowed tiny, chat with tiny:ad: %d %s\nwith a missing model: %d %s", s1, denied, s2, missing)
	}
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}

	registerAdapter(t, tg, "big", "acme", 7)
	w.mu.Lock()
	w.refuseLoad = true
	w.mu.Unlock()
	status, hdr, body := tg.post("/v1/chat/completions", adapterChat("tiny:big"))
	if e := decodeEnvelope(t, body); status != 503 || e.Error.Code == nil || *e.Error.Code != "worker_unavailable" || hdr.Get("Retry-After") == "" {
		t.Fatalf("no room for tiny:big: %d %s", status, body)
	}
}

// tenantUpload posts the adapter files as tg's tenant to POST
// /v1/adapters (the admin upload's form, fields in order).
func (tg *testGateway) tenantUpload(fields [][2]string, cfg, weights []byte) (int, []byte) {
	tg.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, kv := range fields {
		mw.WriteField(kv[0], kv[1])
	}
	for name, b := range map[string][]byte{adminclient.AdapterFileConfig: cfg, adminclient.AdapterFileWeights: weights} {
		w, _ := mw.CreateFormFile(name, name)
		w.Write(b)
	}
	mw.Close()
	return tg.send(http.MethodPost, "/v1/adapters", mw.FormDataContentType(), buf.Bytes())
}

// send makes an API request as tg's tenant.
func (tg *testGateway) send(method, path, contentType string, body []byte) (int, []byte) {
	tg.t.Helper()
	req, _ := http.NewRequest(method, tg.base+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tg.key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := tg.http.Do(req)
	if err != nil {
		tg.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestTenantRegistersOwnAdapter: a tenant registers adapters itself
// (POST /v1/adapters) only within its policy, limits.max_adapters (0 by
// default: none); it owns what it registers (naming an owner or sharing
// is refused: sharing is the platform's), lists its own, and deletes
// only its own — another's is the 404 of a missing one. The adapter it
// registered serves its requests, and no other tenant's.
func TestTenantRegistersOwnAdapter(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.adapters = map[string]bool{}
	w.start()
	cfg, weights := testAdapterFiles(t, 3)
	fields := [][2]string{{"base", "tiny"}, {"name", "mine"}}
	beta := tg.as("beta")

	if code, body := tg.tenantUpload(fields, cfg, weights); code != http.StatusForbidden || !strings.Contains(string(body), "permission_denied") {
		t.Fatalf("upload with max_adapters 0: %d %s", code, body)
	}
	acme, err := tg.Store().GetTenant(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	acme.Limits.MaxAdapters = 1
	if _, err := tg.Store().UpdateTenant(t.Context(), acme); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]string{{"owner", "beta"}, {"shared_with", "beta"}} {
		if code, body := tg.tenantUpload(append(fields, f), cfg, weights); code != http.StatusBadRequest || !strings.Contains(string(body), `"param":"`+f[0]+`"`) {
			t.Fatalf("upload with %s: %d %s", f[0], code, body)
		}
	}
	code, body := tg.tenantUpload(fields, cfg, weights)
	var a tenant.Adapter
	if err := json.Unmarshal(body, &a); code != http.StatusCreated || err != nil || a.Name != "tiny:mine" || a.Owner != "acme" ||
		len(a.SharedWith) != 0 || a.Hash != lora.Hash(cfg, weights) {
		t.Fatalf("acme's upload: %d %s", code, body)
	}
	fields[1][1] = "second"
	if code, body := tg.tenantUpload(fields, cfg, weights); code != http.StatusForbidden {
		t.Fatalf("a second upload over max_adapters 1: %d %s", code, body)
	}

	status, _, reply := tg.post("/v1/chat/completions", adapterChat("tiny:mine"))
	if status != http.StatusOK || !strings.Contains(string(reply), fakeReply) {
		t.Fatalf("acme's chat with its own adapter: %d %s", status, reply)
	}
	if status, _, reply := beta.post("/v1/chat/completions", adapterChat("tiny:mine")); status != http.StatusNotFound {
		t.Fatalf("beta's chat with acme's adapter: %d %s", status, reply)
	}
	for _, c := range []struct {
		tg   *testGateway
		want string
	}{{tg, `"name":"tiny:mine"`}, {beta, `"data":[]`}} {
		if code, body := c.tg.send(http.MethodGet, "/v1/adapters", "", nil); code != http.StatusOK || !strings.Contains(string(body), c.want) {
			t.Fatalf("GET /v1/adapters: %d %s, want %s", code, body, c.want)
		}
	}
	s1, foreign := beta.send(http.MethodDelete, "/v1/adapters/tiny:mine", "", nil)
	s2, missing := beta.send(http.MethodDelete, "/v1/adapters/tiny:none", "", nil)
	if s1 != http.StatusNotFound || s2 != http.StatusNotFound || string(foreign) != strings.ReplaceAll(string(missing), "tiny:none", "tiny:mine") {
		t.Fatalf("beta deleting acme's adapter: %d %s\na missing one: %d %s", s1, foreign, s2, missing)
	}
	if code, body := tg.send(http.MethodDelete, "/v1/adapters/tiny:mine", "", nil); code != http.StatusOK {
		t.Fatalf("acme deleting its adapter: %d %s", code, body)
	}
	if status, _, _ := tg.post("/v1/chat/completions", adapterChat("tiny:mine")); status != http.StatusNotFound {
		t.Fatalf("chat with the deleted adapter: %d", status)
	}
}
