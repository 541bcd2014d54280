package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/runtime"
)

// reference is what running the engine directly gives for a prompt.
type reference struct {
	tokens                   []int32
	finish                   string
	promptTokens, completion int64
}

// runReference runs each prompt on a fresh runtime of the same model,
// outside any worker, one at a time and with another prefill chunk size.
func runReference(t *testing.T, prompts [][]int32, sp *controlpb.SamplingParams) []reference {
	t.Helper()
	return runReferenceUnder(t, nil, prompts, sp)
}

// runReferenceUnder is runReference under LoRA adapter ad (nil: the base
// model).
func runReferenceUnder(t *testing.T, ad *testAdapter, prompts [][]int32, sp *controlpb.SamplingParams) []reference {
	t.Helper()
	rt, err := runtime.Open(runtime.Options{ModelDir: modelDir, Threads: 1, PageTokens: pageTokens,
		KVBytes: testPages * tinyPageSize, ChunkTokens: 64, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; rt.Close() }()
	sampling, err := samplingFrom(sp)
	if err != nil {
		t.Fatal(err)
	}
	var cons constraints
	if sampling.Constraint, err = cons.starter(rt.Model, sp.GetConstraint()); err != nil {
		t.Fatal(err)
	}
	var prepared engine.Adapter
	if ad != nil {
		prepared = ad.prepare(t, rt)
	}
	out := make([]reference, len(prompts))
	for i, p := range prompts {
		o := kvpool.Owner{Tenant: "ref", Request: fmt.Sprint(i), Epoch: 1}
		if ad != nil {
			o.Adapter = ad.ref.Hash
		}
		pages, err := rt.Pool.Reserve(o, len(p)+sampling.MaxTokens)
		if err != nil {
			t.Fatal(err)
		}
		s, err := rt.Engine.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: sampling, Adapter: prepared})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == engine.EventToken {
				out[i].tokens = append(out[i].tokens, ev.Token)
			}
			if ev.Kind == engine.EventDone {
				r := ev.Result
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				out[i].finish = string(r.Finish)
				out[i].promptTokens, out[i].completion = int64(r.PromptTokens), int64(r.CompletionTokens)
				break
			}
		}
		if _, err := rt.Pool.Release(o); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkAgainst compares a Generate outcome with the reference: content,
// finish reason and usage.
func checkAgainst(t *testing.T, what string, got outcome, want reference) {
	t.Helper()
	if got.err != nil {
		t.Errorf("%s: %v", what, got.err)
		return
	}
	if !slices.Equal(got.tokens, want.tokens) {
		t.Errorf("%s: tokens\n%v\nwant\n%v", what, got.tokens, want.tokens)
	}
	if got.ready != want.promptTokens {
		t.Errorf("%s: Ready.prompt_tokens = %d, want %d", what, got.ready, want.promptTokens)
	}
	d := got.done
	if d.GetFinishReason() != want.finish || d.GetPromptTokens() != want.promptTokens || d.GetCompletionTokens() != want.completion {
		t.Errorf("%s: Done %v, want finish %s, usage %d+%d", what, d, want.finish, want.promptTokens, want.completion)
	}
}

// Prompt lengths around the page boundary, and a long one.
var promptLens = []int{1, pageTokens - 1, pageTokens, pageTokens + 1, 100}

func promptsOf(lens []int) [][]int32 {
	ps := make([][]int32, len(lens))
	for i, n := range lens {
		ps[i] = prompt(n, i)
	}
	return ps
}

// samplers: greedy to the length limit, greedy that may stop at EOS, and
// seeded random sampling (counter-based, so P/D must match too).
var samplers = map[string]*controlpb.SamplingParams{
	"greedy":  greedy(6),
	"eos":     {MaxTokens: 40},
	"sampled": {MaxTokens: 6, Temperature: 0.9, TopP: 0.95, Seed: 7, IgnoreEos: true},
	// structured output: the prefill worker's first token is masked too.
	"json": {MaxTokens: 40, Temperature: 1, Seed: 3,
		Constraint: `{"json_schema":{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99},"b":{"type":"string","maxLength":6}},"required":["a","b"]}}`},
}

// TestBothMatchesEngine: a both worker's Generate returns exactly what the
// engine computes on its own, with honest usage.
func TestBothMatchesEngine(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	prompts := promptsOf(promptLens)
	for name, sp := range samplers {
		want := runReference(t, prompts, sp)
		for i, p := range prompts {
			got := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", fmt.Sprintf("%s-%d", name, i), 1), Prompt: p, Sampling: sp})
			checkAgainst(t, fmt.Sprintf("%s, prompt of %d", name, len(p)), got, want[i])
		}
	}
	waitQuiet(t, w)

	st, err := w.client.Status(context.Background(), &controlpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPool().GetFreePages() != testPages || len(st.GetRequests()) != 0 || st.GetWorker().GetRole() != controlpb.Role_ROLE_BOTH {
		t.Errorf("Status after the requests: %v", st)
	}
}

// TestSpeculativeGenerateMatchesEngine: a worker with n-gram speculation
// on (worker.speculative) returns exactly what the engine computes without
// it, greedy and sampled, batched, with honest usage; a request's
// speculative: false turns it off; and proposals were verified.
func TestSpeculativeGenerateMatchesEngine(t *testing.T) {
	cfg := testConfig(t, config.RoleBoth, config.TransferTCP, testPages)
	cfg.Worker.Speculative = config.Speculative{Method: config.SpeculativeNgram, K: 8, NgramMax: 3, NgramMin: 1}
	w := startWorker(t, cfg)
	seg := prompt(9, 3)
	var repeated []int32
	for range 6 {
		repeated = append(repeated, seg...)
	}
	prompts := [][]int32{repeated, prompt(40, 4), prompt(17, 5)}
	off := false
	for name, sp := range map[string]*controlpb.SamplingParams{
		"greedy":  greedy(40),
		"sampled": {MaxTokens: 30, Temperature: 0.9, TopP: 0.95, Seed: 7, IgnoreEos: true},
		"off":     {MaxTokens: 20, IgnoreEos: true, Speculative: &off},
	} {
		want := runReference(t, prompts, sp)
		got := make([]outcome, len(prompts))
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Go(func() {
				got[i] = generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", fmt.Sprintf("spec-%s-%d", name, i), 1), Prompt: p, Sampling: sp})
			})
		}
		wg.Wait()
		for i := range prompts {
			checkAgainst(t, fmt.Sprintf("%s, prompt %d", name, i), got[i], want[i])
		}
	}
	waitQuiet(t, w)
	before := w.rt.Engine.Stats()
	if before.SpecProposed == 0 {
		t.Errorf("no token was proposed: %+v", before)
	}
	// Under a LoRA adapter, batched with base-model requests: the
	// verification steps' logits rows are the adapter's too.
	a := newTestAdapter(t, 4)
	if _, err := a.load(w.client, false); err != nil {
		t.Fatal(err)
	}
	sp := greedy(40)
	want, base := runReferenceUnder(t, a, prompts, sp), runReference(t, prompts, sp)
	got := make([]outcome, 2*len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			got[i] = generate(t, w.client, &controlpb.GenerateRequest{Owner: a.owner("acme", fmt.Sprint("spec-lora-", i)), Prompt: p, Sampling: sp, Adapter: a.ref})
		})
		wg.Go(func() {
			got[len(prompts)+i] = generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", fmt.Sprint("spec-base-", i), 1), Prompt: p, Sampling: sp})
		})
	}
	wg.Wait()
	for i := range prompts {
		checkAgainst(t, fmt.Sprintf("adapter, prompt %d", i), got[i], want[i])
		checkAgainst(t, fmt.Sprintf("base beside the adapter, prompt %d", i), got[len(prompts)+i], base[i])
	}
	waitQuiet(t, w)
	if s := w.rt.Engine.Stats(); s.SpecProposed == before.SpecProposed {
		t.Errorf("no token was proposed beside the adapter: %+v", s)
	}
}

// TestGenerateConcurrent: requests of several tenants batched together
// still produce the reference tokens.
func TestGenerateConcurrent(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	prompts := promptsOf([]int{5, 21, 33, 48, 2, 17})
	sp := greedy(8)
	want := runReference(t, prompts, sp)
	got := make([]outcome, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			got[i] = generate(t, w.client, &controlpb.GenerateRequest{Owner: owner(fmt.Sprint("tenant", i%3), fmt.Sprint("c", i), 1), Prompt: p, Sampling: sp})
		})
	}
	wg.Wait()
	for i := range prompts {
		checkAgainst(t, fmt.Sprint("request ", i), got[i], want[i])
	}
	waitQuiet(t, w)
}

// TestModelAssets: the tokenizer files as they are on disk, with their
// hash.
func TestModelAssets(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages))
	a, err := w.client.ModelAssets(context.Background(), &controlpb.ModelAssetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(modelDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tok)
	if a.GetModel() != "tiny" || !bytes.Equal(a.GetTokenizerJson(), tok) || a.GetTokenizerSha256() != hex.EncodeToString(sum[:]) {
		t.Errorf("ModelAssets: model %q, %d tokenizer bytes, sha %s", a.GetModel(), len(a.GetTokenizerJson()), a.GetTokenizerSha256())
	}
	for name, got := range map[string][]byte{"generation_config.json": a.GetGenerationConfigJson(), "tokenizer_config.json": a.GetTokenizerConfigJson()} {
		want, err := os.ReadFile(filepath.Join(modelDir, name))
		if err != nil {
			want = nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got %d bytes, file has %d", name, len(got), len(want))
		}
	}
}

// pd is a prefill worker and a decode worker over one transfer backend.
type pd struct {
	prefill, decode *started
	// adapter, when set, is the LoRA adapter run names in its calls (the
	// owner's adapter must be its hash).
	adapter *controlpb.AdapterRef
}

// startPD starts a prefill worker (with a smaller pool than decode's, so
// the two capacities can be told apart) and a decode worker.
func startPD(t *testing.T, backend config.TransferBackend) pd {
	t.Helper()
	return pd{
		prefill: startWorker(t, testConfig(t, config.RolePrefill, backend, testPages*3/4)),
		decode:  startWorker(t, testConfig(t, config.RoleDecode, backend, testPages)),
	}
}

// pdRun is one request through P/D as the gateway drives it.
type pdRun struct {
	reserveErr error
	prefill    *controlpb.PrefillResponse
	prefillErr error
	gen        outcome
}

// run reserves on decode, then prefills and generates concurrently.
// ctx, when set, bounds the Prefill and Generate calls.
func (s pd) run(t *testing.T, ctx context.Context, o *controlpb.Owner, p []int32, sp *controlpb.SamplingParams) pdRun {
	t.Helper()
	if ctx == nil {
		ctx = context.Background()
	}
	res, err := s.decode.client.Reserve(ctx, &controlpb.ReserveRequest{Owner: o, PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + int64(sp.GetMaxTokens()),
		Adapter: s.adapter})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	var r pdRun
	var wg sync.WaitGroup
	wg.Go(func() {
		r.prefill, r.prefillErr = s.prefill.client.Prefill(ctx, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket(), Adapter: s.adapter})
	})
	stream, err := s.decode.client.Generate(ctx, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket(), Adapter: s.adapter})
	r.gen = collect(t, stream, err)
	wg.Wait()
	return r
}

// TestPrefillDecode: through P/D, over tcp and shm, every prompt length
// gives exactly the tokens of the engine run directly.
func TestPrefillDecode(t *testing.T) {
	prompts := promptsOf(promptLens)
	refs := map[string][]reference{}
	for name, sp := range samplers {
		refs[name] = runReference(t, prompts, sp)
	}
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) {
			s := startPD(t, backend)
			for name, sp := range samplers {
				for i, p := range prompts {
					what := fmt.Sprintf("%s, prompt of %d", name, len(p))
					r := s.run(t, nil, owner("acme", fmt.Sprintf("%s-%d", name, i), 1), p, sp)
					if r.prefillErr != nil {
						t.Fatalf("%s: Prefill: %v", what, r.prefillErr)
					}
					pages := (len(p) + pageTokens - 1) / pageTokens
					if r.prefill.GetPromptTokens() != int64(len(p)) || r.prefill.GetPagesSent() != int32(pages) ||
						r.prefill.GetBytesSent() != int64(pages*tinyPageSize) {
						t.Errorf("%s: PrefillResponse %v, want %d tokens in %d pages", what, r.prefill, len(p), pages)
					}
					if len(refs[name][i].tokens) > 0 && r.prefill.GetFirstToken() != refs[name][i].tokens[0] {
						t.Errorf("%s: first token %d, want %d", what, r.prefill.GetFirstToken(), refs[name][i].tokens[0])
					}
					checkAgainst(t, what, r.gen, refs[name][i])
				}
			}
			waitQuiet(t, s.prefill, s.decode)
		})
	}
}

// TestPrefillOpensTransferOnProgress: prefill opens its transfer stream
// only once the engine has prefilled the request's first chunk, so a
// request that waits in the engine's queue for longer than decode's
// receiver waits between frames (ReceiverConfig.IdleTimeout) does not
// find its stream timed out when its turn comes. The result is still the
// reference's.
func TestPrefillOpensTransferOnProgress(t *testing.T) {
	s := startPD(t, config.TransferTCP)
	p := promptsOf([]int{40})[0]
	sp := greedy(4)
	want := runReference(t, [][]int32{p}, sp)
	var opened atomic.Int64
	before := s.prefill.rt.Engine.Stats().PrefillTokens
	f := func(context.Context) {
		opened.Add(1)
		if got := s.prefill.rt.Engine.Stats().PrefillTokens - before; got == 0 {
			t.Errorf("prefill opened its transfer stream before the engine prefilled any of the request's tokens")
		}
	}
	s.prefill.hooks.open.Store(&f)
	r := s.run(t, nil, owner("acme", "queued", 1), p, sp)
	if r.prefillErr != nil {
		t.Fatalf("Prefill: %v", r.prefillErr)
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("transfer stream opened %d times, want once", n)
	}
	checkAgainst(t, "queued request", r.gen, want[0])
	waitQuiet(t, s.prefill, s.decode)
}

// TestPrefillDecodeConcurrent: several tenants' requests in flight at once
// through P/D still each get their own reference tokens.
func TestPrefillDecodeConcurrent(t *testing.T) {
	s := startPD(t, config.TransferSHM)
	prompts := promptsOf([]int{3, 16, 40, 29, 1, 64})
	sp := greedy(5)
	want := runReference(t, prompts, sp)
	got := make([]pdRun, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() { got[i] = s.run(t, nil, owner(fmt.Sprint("t", i%2), fmt.Sprint("c", i), 1), p, sp) })
	}
	wg.Wait()
	for i := range prompts {
		if got[i].prefillErr != nil {
			t.Errorf("request %d: Prefill: %v", i, got[i].prefillErr)
		}
		checkAgainst(t, fmt.Sprint("request ", i), got[i].gen, want[i])
	}
	waitQuiet(t, s.prefill, s.decode)
}

// TestReserveTimeout: a reservation nobody uses is fenced and released
// after worker.transfer.reserve_timeout, and a late Generate learns why.
func TestReserveTimeout(t *testing.T) {
	cfg := testConfig(t, config.RoleDecode, config.TransferTCP, testPages)
	cfg.Worker.Transfer.ReserveTimeout = 100 * time.Millisecond
	w := startWorker(t, cfg)
	ctx := context.Background()
	o := owner("acme", "idle", 3)
	res, err := w.client.Reserve(ctx, &controlpb.ReserveRequest{Owner: o, PromptTokens: 10, TotalTokens: 50})
	if err != nil {
		t.Fatal(err)
	}
	if s := w.rt.Pool.Stats(); s.Reserved != 4 {
		t.Fatalf("after Reserve: %+v, want 4 reserved pages", s)
	}
	waitQuiet(t, w)
	got := generate(t, w.client, &controlpb.GenerateRequest{Owner: o, Prompt: prompt(10, 0), Sampling: greedy(4), Ticket: res.GetTicket()})
	if code(got.err) != codes.Aborted {
		t.Errorf("Generate after the timeout: %v, want Aborted", got.err)
	}
	// A new attempt (epoch) may start. Its Generate waits for a transfer
	// that never comes, until the reservation is abandoned.
	o = owner("acme", "idle", 4)
	if res, err = w.client.Reserve(ctx, &controlpb.ReserveRequest{Owner: o, PromptTokens: 10, TotalTokens: 50}); err != nil {
		t.Fatalf("Reserve of the next epoch: %v", err)
	}
	got = generate(t, w.client, &controlpb.GenerateRequest{Owner: o, Prompt: prompt(10, 0), Sampling: greedy(4), Ticket: res.GetTicket()})
	if code(got.err) != codes.Aborted || !strings.Contains(got.err.Error(), "reservation abandoned") {
		t.Errorf("Generate waiting for a transfer that never comes: %v, want Aborted", got.err)
	}
	waitQuiet(t, w)
}

// TestReservationLease (issue 26): a reservation its gateway renews lives
// as long as the renewals come — here three leases, with a Generate
// waiting for a transfer that has not come — and is reclaimed one lease
// after they stop (the gateway vanished): the waiting Generate ends
// Aborted "reservation abandoned", the pool balances, and a late renewal
// learns why. A renewal for another ticket, or for a request holding
// nothing, is NotFound and extends nothing.
func TestReservationLease(t *testing.T) {
	const lease = time.Second
	cfg := testConfig(t, config.RoleDecode, config.TransferTCP, testPages)
	cfg.Worker.Transfer.ReserveTimeout = lease
	w := startWorker(t, cfg)
	ctx := context.Background()
	o := owner("acme", "leased", 1)
	res, err := w.client.Reserve(ctx, &controlpb.ReserveRequest{Owner: o, PromptTokens: 10, TotalTokens: 50})
	if err != nil {
		t.Fatal(err)
	}
	reserved := time.Now()
	if res.GetLeaseMs() != lease.Milliseconds() {
		t.Fatalf("Reserve grants renewals of %d ms, want %d", res.GetLeaseMs(), lease.Milliseconds())
	}
	renew := &controlpb.RenewReservationRequest{Owner: o, TransferId: res.GetTicket().GetTransferId()}
	for _, bad := range []*controlpb.RenewReservationRequest{
		{Owner: o, TransferId: "00000000000000000000000000000000"},
		{Owner: owner("acme", "nothing", 1), TransferId: renew.TransferId},
	} {
		if _, err := w.client.RenewReservation(ctx, bad); code(err) != codes.NotFound {
			t.Errorf("RenewReservation %v: %v, want NotFound", bad, err)
		}
	}
	got := make(chan outcome, 1)
	go func() {
		got <- generate(t, w.client, &controlpb.GenerateRequest{Owner: o, Prompt: prompt(10, 0), Sampling: greedy(4), Ticket: res.GetTicket()})
	}()
	// Renewed every twentieth of the lease for three leases: a liveness
	// bound, not a timing assertion (a renewal is due long before the
	// lease ends).
	for time.Since(reserved) < 3*lease {
		r, err := w.client.RenewReservation(ctx, renew)
		if err != nil {
			t.Fatalf("RenewReservation %s after Reserve: %v", time.Since(reserved), err)
		}
		if r.GetLeaseMs() <= 0 || r.GetLeaseMs() > lease.Milliseconds() {
			t.Fatalf("RenewReservation keeps it %d ms, want (0, %d]", r.GetLeaseMs(), lease.Milliseconds())
		}
		select {
		case o := <-got:
			t.Fatalf("Generate ended while the reservation was renewed: %+v", o)
		case <-time.After(lease / 20):
		}
	}
	if s := w.rt.Pool.Stats(); s.Reserved != 4 {
		t.Fatalf("after three leases of renewals: %+v, want the 4 pages still reserved", s)
	}
	// The renewals stop: one lease later the reservation is reclaimed.
	if o := <-got; code(o.err) != codes.Aborted || !strings.Contains(o.err.Error(), "reservation abandoned") {
		t.Errorf("Generate once the renewals stopped: %v, want Aborted, reservation abandoned", o.err)
	}
	waitQuiet(t, w)
	if _, err := w.client.RenewReservation(ctx, renew); code(err) != codes.Aborted {
		t.Errorf("RenewReservation after it was abandoned: %v, want Aborted", err)
	}
	if v := metricValue(t, w.Worker, "warden_decode_reservation_leases_total", "event", "expired"); v != 1 {
		t.Errorf("%v leases expired, want 1", v)
	}
	if v := metricValue(t, w.Worker, "warden_decode_reservation_leases_total", "event", "renewed"); v < 3 {
		t.Errorf("%v renewals counted", v)
	}
}
