package worker

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/adapters"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/model"
	"github.com/warden-ai/warden/worker/runtime"
)

// testAdapter is a LoRA adapter of the test model, as its two files.
type testAdapter struct {
	ref           *controlpb.AdapterRef
	config, files []byte
	bytes         int64
}

// newTestAdapter draws adapter seed for the test model: rank 4 on every
// projection.
func newTestAdapter(t *testing.T, seed uint64) *testAdapter {
	t.Helper()
	m, err := model.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cj, w, err := lora.Random(&m.Config, lora.Config{Rank: 4, Alpha: 8, Targets: lora.Modules[:]}, 0.12, seed)
	if err != nil {
		t.Fatal(err)
	}
	a, err := lora.Parse(cj, w, &m.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &testAdapter{ref: &controlpb.AdapterRef{Name: "tiny:test", Hash: a.Hash}, config: cj, files: w, bytes: a.Bytes}
}

// prepare parses the adapter for rt's backend.
func (a *testAdapter) prepare(t *testing.T, rt *runtime.Runtime) engine.Adapter {
	t.Helper()
	p, err := lora.Parse(a.config, a.files, &rt.Model.Config)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := rt.PrepareAdapter(p)
	if err != nil {
		t.Fatal(err)
	}
	return ad
}

// load streams the adapter to c in three parts, as the gateway does.
func (a *testAdapter) load(c controlpb.WorkerClient, pin bool) (*controlpb.LoadAdapterResponse, error) {
	st, err := c.LoadAdapter(context.Background())
	if err != nil {
		return nil, err
	}
	third := len(a.files) / 3
	parts := []*controlpb.AdapterPart{
		{Ref: a.ref, ConfigJson: a.config, WeightsSize: int64(len(a.files)), Weights: a.files[:third], Pin: pin},
		{Weights: a.files[third : 2*third]},
		{Weights: a.files[2*third:]},
	}
	for _, p := range parts {
		if err := st.Send(p); err != nil {
			break // the worker answered early; CloseAndRecv has its status
		}
	}
	return st.CloseAndRecv()
}

func (a *testAdapter) owner(tenant, req string) *controlpb.Owner {
	o := owner(tenant, req, 1)
	o.Adapter = a.ref.Hash
	return o
}

// TestGenerateUnderAdapter: a Generate naming an adapter the worker does
// not hold fails with FAILED_PRECONDITION "adapter not loaded: <hash>";
// after LoadAdapter the same call gives the engine's tokens under the
// adapter (which the cpu backend's tests hold to the float64 reference
// with the adapter merged), unlike the base model's; the heartbeat's
// statistics list it; and a request holds it until it ends.
func TestGenerateUnderAdapter(t *testing.T) {
	a, b := newTestAdapter(t, 1), newTestAdapter(t, 2)
	cfg := testConfig(t, config.RoleBoth, config.TransferTCP, testPages)
	cfg.Worker.Adapters.Memory = config.ByteSize(a.bytes) // room for one adapter
	w := startWorker(t, cfg)
	p := promptsOf([]int{40})
	sp := greedy(8)
	want := runReferenceUnder(t, a, p, sp)[0]
	base := runReference(t, p, sp)[0]
	if slices.Equal(want.tokens, base.tokens) {
		t.Fatalf("the adapter does not change the output %v", base.tokens)
	}

	req := &controlpb.GenerateRequest{Owner: a.owner("acme", "r1"), Prompt: p[0], Sampling: sp, Adapter: a.ref}
	got := generate(t, w.client, req)
	if h, ok := adapters.IsNotLoaded(got.err); !ok || h != a.ref.Hash || code(got.err) != codes.FailedPrecondition {
		t.Fatalf("Generate under an adapter not loaded: %v, want FAILED_PRECONDITION adapter not loaded: %s", got.err, a.ref.Hash)
	}
	resp, err := a.load(w.client, false)
	if err != nil {
		t.Fatalf("LoadAdapter: %v", err)
	}
	if resp.GetBytes() != a.bytes {
		t.Fatalf("LoadAdapter: %d bytes, want %d", resp.GetBytes(), a.bytes)
	}
	if s := w.adapters.Stats(); !slices.Equal(s.Loaded, []string{a.ref.Hash}) || s.UsedBytes != a.bytes || s.CapacityBytes != a.bytes {
		t.Fatalf("heartbeat statistics %v", s)
	}
	req.Owner = a.owner("acme", "r2")
	checkAgainst(t, "under the adapter", generate(t, w.client, req), want)
	checkAgainst(t, "the base model", generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", "r3", 1), Prompt: p[0], Sampling: sp}), base)

	// The ref must name the owner's adapter.
	bad := &controlpb.GenerateRequest{Owner: owner("acme", "r4", 1), Prompt: p[0], Sampling: sp, Adapter: a.ref}
	if got := generate(t, w.client, bad); code(got.err) != codes.InvalidArgument {
		t.Fatalf("an adapter ref without the owner's adapter: %v, want INVALID_ARGUMENT", got.err)
	}

	// While a request runs under a, b cannot take its room; once it
	// ended, b evicts a.
	stall := w.stallTokens(t)
	req.Owner = a.owner("acme", "r5")
	held := make(chan outcome, 1)
	go func() { held <- generate(t, w.client, req) }()
	wait(t, stall.reached, "the request under the adapter to produce its first token")
	if _, err := b.load(w.client, false); code(err) != codes.ResourceExhausted {
		t.Fatalf("loading over an adapter in use: %v, want RESOURCE_EXHAUSTED", err)
	}
	stall.unblock()
	checkAgainst(t, "under the adapter, held", <-held, want)
	waitQuiet(t, w)
	if _, err := b.load(w.client, false); err != nil {
		t.Fatalf("loading once the request ended: %v", err)
	}
	if s := w.adapters.Stats(); !slices.Equal(s.Loaded, []string{b.ref.Hash}) {
		t.Fatalf("loaded %v, want only %s", s.Loaded, b.ref.Hash)
	}
}

// TestEmbedUnderAdapter: an Embed naming an adapter the worker does not
// hold fails with FAILED_PRECONDITION "adapter not loaded: <hash>"; after
// LoadAdapter it returns vectors unlike the base model's (the cpu
// backend's tests hold them to the float64 reference with the adapter
// merged), each the same batched as alone; a ref that is not the owner's
// adapter is refused, and no page stays reserved.
func TestEmbedUnderAdapter(t *testing.T) {
	a := newTestAdapter(t, 1)
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	ctx := context.Background()
	inputs := embedInputs(37, 5)
	under := func(id string, in []*controlpb.EmbedInput) ([]*controlpb.Embedding, error) {
		resp, err := w.client.Embed(ctx, &controlpb.EmbedRequest{Owner: a.owner("acme", id), Inputs: in,
			Pooling: controlpb.Pooling_POOLING_LAST, Adapter: a.ref})
		return resp.GetEmbeddings(), err
	}
	if _, err := under("e1", inputs); code(err) != codes.FailedPrecondition {
		t.Fatalf("Embed under an adapter not loaded: %v, want FAILED_PRECONDITION", err)
	} else if h, ok := adapters.IsNotLoaded(err); !ok || h != a.ref.Hash {
		t.Fatalf("Embed under an adapter not loaded: %v, want adapter not loaded: %s", err, a.ref.Hash)
	}
	if _, err := a.load(w.client, false); err != nil {
		t.Fatalf("LoadAdapter: %v", err)
	}
	got, err := under("e2", inputs)
	if err != nil {
		t.Fatal(err)
	}
	base, err := w.client.Embed(ctx, &controlpb.EmbedRequest{Owner: owner("acme", "e3", 1), Inputs: inputs, Pooling: controlpb.Pooling_POOLING_LAST})
	if err != nil {
		t.Fatal(err)
	}
	for i := range inputs {
		if slices.Equal(got[i].GetValues(), base.GetEmbeddings()[i].GetValues()) {
			t.Fatalf("input %d: the adapter does not change the vector", i)
		}
		alone, err := under(fmt.Sprint("alone-", i), inputs[i:i+1])
		if err != nil || !slices.Equal(alone[0].GetValues(), got[i].GetValues()) {
			t.Fatalf("input %d: %v, or a vector alone unlike the batched one", i, err)
		}
	}
	bad := &controlpb.EmbedRequest{Owner: owner("acme", "e4", 1), Inputs: inputs, Pooling: controlpb.Pooling_POOLING_LAST, Adapter: a.ref}
	if _, err := w.client.Embed(ctx, bad); code(err) != codes.InvalidArgument {
		t.Fatalf("an adapter ref without the owner's adapter: %v, want INVALID_ARGUMENT", err)
	}
	waitQuiet(t, w)
}

// TestPrefillDecodeUnderAdapter: through P/D (tcp and shm) a request
// under an adapter gets the engine's tokens under it; decode refuses the
// reservation while it does not hold the adapter, so the gateway can load
// it before the transfer.
func TestPrefillDecodeUnderAdapter(t *testing.T) {
	a := newTestAdapter(t, 3)
	p := promptsOf([]int{pageTokens + 1, 70})
	sp := greedy(6)
	want := runReferenceUnder(t, a, p, sp)
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) {
			s := startPD(t, backend)
			s.adapter = a.ref
			_, err := s.decode.client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: a.owner("acme", "early"),
				PromptTokens: 4, TotalTokens: 8, Adapter: a.ref})
			if h, ok := adapters.IsNotLoaded(err); !ok || h != a.ref.Hash {
				t.Fatalf("Reserve under an adapter not loaded: %v", err)
			}
			for _, w := range []*started{s.prefill, s.decode} {
				if _, err := a.load(w.client, true); err != nil {
					t.Fatalf("LoadAdapter on %s: %v", w.id, err)
				}
			}
			for i, pr := range p {
				r := s.run(t, nil, a.owner("acme", string(rune('a'+i))), pr, sp)
				if r.prefillErr != nil {
					t.Fatalf("Prefill: %v", r.prefillErr)
				}
				checkAgainst(t, "P/D under the adapter", r.gen, want[i])
			}
			waitQuiet(t, s.prefill, s.decode)
		})
	}
}

// TestAdaptersDisabled: with worker.adapters.memory 0 (as on a backend
// that does not compute adapters) a request naming an adapter and a load
// are refused with FAILED_PRECONDITION that is not "adapter not loaded",
// so the gateway does not push the adapter here; base requests run.
func TestAdaptersDisabled(t *testing.T) {
	a := newTestAdapter(t, 5)
	cfg := testConfig(t, config.RoleBoth, config.TransferTCP, testPages)
	cfg.Worker.Adapters.Memory = 0
	w := startWorker(t, cfg)
	p := promptsOf([]int{9})
	got := generate(t, w.client, &controlpb.GenerateRequest{Owner: a.owner("acme", "off"), Prompt: p[0], Sampling: greedy(3), Adapter: a.ref})
	if _, notLoaded := adapters.IsNotLoaded(got.err); notLoaded || code(got.err) != codes.FailedPrecondition {
		t.Fatalf("Generate under an adapter with adapters off: %v, want FAILED_PRECONDITION (not \"adapter not loaded\")", got.err)
	}
	if _, err := a.load(w.client, false); code(err) != codes.FailedPrecondition {
		t.Fatalf("LoadAdapter with adapters off: %v, want FAILED_PRECONDITION", err)
	}
	checkAgainst(t, "base model", generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", "base", 1), Prompt: p[0], Sampling: greedy(3)}),
		runReference(t, p, greedy(3))[0])
	if s := w.adapters.Stats(); s.CapacityBytes != 0 || len(s.Loaded) != 0 {
		t.Fatalf("heartbeat statistics %v, want an empty memory of capacity 0", s)
	}
}
