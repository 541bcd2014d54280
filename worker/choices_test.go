package worker

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/engine"
)

// TestBothServesChoicesFromOnePrefill: Generate with n = 3 on a both
// worker streams three choices, each equal to a single Generate with the
// choice's seed (engine.ChoiceSeed); Done counts the prompt once and sums
// the completions; the engine prefilled the prompt once.
func TestBothServesChoicesFromOnePrefill(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	p := prompt(37, 5)
	for name, sp := range map[string]*controlpb.SamplingParams{
		"greedy": greedy(10),
		"seeded": {Temperature: 1, Seed: 7, MaxTokens: 10, IgnoreEos: true},
	} {
		n := proto.Clone(sp).(*controlpb.SamplingParams)
		n.N = 3
		before := w.rt.Engine.Stats()
		got := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", name, 1), Prompt: p, Sampling: n})
		after := w.rt.Engine.Stats()
		if got.err != nil {
			t.Fatalf("%s: %v", name, got.err)
		}
		if after.Prefills-before.Prefills != 1 || after.PrefillTokens-before.PrefillTokens != uint64(len(p)) {
			t.Fatalf("%s: %d prefills of %d tokens for n = 3, want 1 of %d", name,
				after.Prefills-before.Prefills, after.PrefillTokens-before.PrefillTokens, len(p))
		}
		d := got.done
		if d.GetPromptTokens() != int64(len(p)) || d.GetCompletionTokens() != 30 || len(d.GetChoices()) != 3 {
			t.Fatalf("%s: Done %v", name, d)
		}
		for k := range 3 {
			single := proto.Clone(sp).(*controlpb.SamplingParams)
			single.Seed = engine.ChoiceSeed(sp.GetSeed(), k)
			alone := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", fmt.Sprintf("%s-%d", name, k), 1), Prompt: p, Sampling: single})
			if !slices.Equal(got.choices[int32(k)], alone.tokens) || d.GetChoices()[k].GetFinishReason() != "length" {
				t.Fatalf("%s choice %d: %v (%v), alone %v", name, k, got.choices[int32(k)], d.GetChoices()[k], alone.tokens)
			}
		}
	}
	waitQuiet(t, w)
	if st := w.rt.Pool.Stats(); st.Free != st.Total {
		t.Fatalf("pages left held: %+v", st)
	}
}

// runChoices is one n > 1 request through P/D as the gateway drives it:
// Reserve for n choices, Prefill (every choice's first token), then
// Generate with those first tokens (first, when set, replaces them).
func (s pd) runChoices(t *testing.T, o *controlpb.Owner, p []int32, sp *controlpb.SamplingParams, first func([]int32) []int32) pdRun {
	t.Helper()
	ctx := context.Background()
	res, err := s.decode.client.Reserve(ctx, &controlpb.ReserveRequest{Owner: o, PromptTokens: int64(len(p)),
		TotalTokens: int64(len(p)) + int64(sp.GetMaxTokens()), Choices: sp.GetN()})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	var r pdRun
	r.prefill, r.prefillErr = s.prefill.client.Prefill(ctx, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
	var tokens []int32
	for _, c := range r.prefill.GetChoices() {
		tokens = append(tokens, c.GetToken())
	}
	if first != nil {
		tokens = first(tokens)
	}
	r.gen = generate(t, s.decode.client, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket(), FirstTokens: tokens})
	return r
}

// TestPrefillDecodeServesChoices: n = 3 through P/D, over tcp and shm:
// the prefill worker prefills the prompt once and returns three first
// tokens (with their logprobs), decode forks the choices from the one
// transfer; each choice equals a single request run with the choice's
// seed. Decode refuses first tokens that disagree with the transfer or a
// number of choices other than its reservation's; every page ends free on
// both workers.
func TestPrefillDecodeServesChoices(t *testing.T) {
	p := prompt(37, 5)
	sp := &controlpb.SamplingParams{Temperature: 1, Seed: 7, MaxTokens: 10, IgnoreEos: true, Logprobs: true, N: 3}
	want := make([]reference, 3)
	for k := range want {
		single := proto.Clone(sp).(*controlpb.SamplingParams)
		single.N, single.Seed = 0, engine.ChoiceSeed(sp.GetSeed(), k)
		want[k] = runReference(t, [][]int32{p}, single)[0]
	}
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) {
			s := startPD(t, backend)
			before := s.prefill.rt.Engine.Stats()
			r := s.runChoices(t, owner("acme", "n3", 1), p, sp, nil)
			after := s.prefill.rt.Engine.Stats()
			if r.prefillErr != nil || r.gen.err != nil {
				t.Fatalf("Prefill: %v; Generate: %v", r.prefillErr, r.gen.err)
			}
			if after.Prefills-before.Prefills != 1 || after.PrefillTokens-before.PrefillTokens != uint64(len(p)) {
				t.Fatalf("prefill worker: %d prefills of %d tokens for n = 3, want 1 of %d",
					after.Prefills-before.Prefills, after.PrefillTokens-before.PrefillTokens, len(p))
			}
			cs := r.prefill.GetChoices()
			if len(cs) != 3 || cs[0].GetToken() != r.prefill.GetFirstToken() {
				t.Fatalf("PrefillResponse choices %v, first token %d", cs, r.prefill.GetFirstToken())
			}
			d := r.gen.done
			if d.GetPromptTokens() != int64(len(p)) || d.GetCompletionTokens() != 30 || len(d.GetChoices()) != 3 {
				t.Fatalf("Done %v", d)
			}
			for k := range 3 {
				if got := r.gen.choices[int32(k)]; !slices.Equal(got, want[k].tokens) || cs[k].GetToken() != want[k].tokens[0] || cs[k].GetLogprobs() == nil {
					t.Fatalf("choice %d: %v (first %v), single request with its seed %v", k, got, cs[k], want[k].tokens)
				}
			}

			bad := s.runChoices(t, owner("acme", "bad-first", 1), p, sp, func(ts []int32) []int32 {
				ts[0] = (ts[0] + 1) % 100
				return ts
			})
			if code(bad.gen.err) != codes.DataLoss || len(bad.gen.tokens) != 0 {
				t.Fatalf("Generate with another first token: %v, tokens %v; want DataLoss and none", bad.gen.err, bad.gen.tokens)
			}
			fewer := s.runChoices(t, owner("acme", "fewer", 1), p, sp, func(ts []int32) []int32 { return ts[:2] })
			if code(fewer.gen.err) != codes.InvalidArgument {
				t.Fatalf("Generate with 2 first tokens for 3 choices: %v", fewer.gen.err)
			}
			s.abortBoth(t, owner("acme", "fewer", 1))
			waitQuiet(t, s.prefill, s.decode)
			for _, w := range []*started{s.prefill, s.decode} {
				if st := w.rt.Pool.Stats(); st.Free != st.Total {
					t.Fatalf("%s: pages left held: %+v", w.id, st)
				}
			}
		})
	}
}

// TestChoicesNeedAReservationForThem: a decode worker runs n > 1 only
// from a reservation made for n choices.
func TestChoicesNeedAReservationForThem(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages))
	p := prompt(8, 1)
	sp := greedy(4)
	sp.N = 2
	got := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", "n", 1), Prompt: p, Sampling: sp})
	if code(got.err) != codes.NotFound {
		t.Fatalf("n = 2 on a decode worker without a reservation: %v", got.err)
	}
	res, err := w.client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: owner("acme", "one", 1), PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + 4})
	if err != nil {
		t.Fatal(err)
	}
	got = generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", "one", 1), Prompt: p, Sampling: sp, Ticket: res.GetTicket(), FirstTokens: []int32{1, 2}})
	if code(got.err) != codes.InvalidArgument {
		t.Fatalf("n = 2 on a reservation for one choice: %v", got.err)
	}
	// Give the reservation back: a stopping worker drains what it holds.
	if _, err := w.client.Abort(context.Background(), &controlpb.AbortRequest{Owner: owner("acme", "one", 1), Cause: "client"}); err != nil {
		t.Fatal(err)
	}
}
