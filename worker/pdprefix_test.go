package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
)

// runCached is run with the cache domain the gateway attaches to Reserve,
// Prefill and Generate, and the prompt in the ReserveRequest; it also
// returns the ticket decode issued.
func (s pd) runCached(t *testing.T, domain string, o *controlpb.Owner, p []int32, sp *controlpb.SamplingParams) (pdRun, *controlpb.Ticket) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), cachekey.MetadataDomain, domain)
	res, err := s.decode.client.Reserve(ctx, &controlpb.ReserveRequest{
		Owner: o, PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + int64(sp.GetMaxTokens()), Prompt: p,
	})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	var r pdRun
	var wg sync.WaitGroup
	wg.Go(func() {
		r.prefill, r.prefillErr = s.prefill.client.Prefill(ctx, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
	})
	stream, err := s.decode.client.Generate(ctx, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
	r.gen = collect(t, stream, err)
	wg.Wait()
	return r, res.GetTicket()
}

// pageHits models what a pool of one domain holds: the prompts' full
// pages sealed so far. hit returns how many leading full pages of the
// first n tokens of p it holds.
type pageHits map[string]bool

func (h pageHits) add(p []int32) {
	for k := pageTokens; k <= len(p); k += pageTokens {
		h[fmt.Sprint(p[:k])] = true
	}
}

func (h pageHits) hit(p []int32, n int) int {
	k := 0
	for (k+1)*pageTokens <= n && h[fmt.Sprint(p[:(k+1)*pageTokens])] {
		k++
	}
	return k
}

// conversations are the prompts the P/D cache tests send, in order: a
// multi-turn chat (each turn re-sends the whole history and appends),
// requests sharing a system prompt, and prompts whose shared prefix ends
// one before, at and one after a page boundary.
func conversations() [][]int32 {
	var out [][]int32
	turn := prompt(2*pageTokens+5, 21)
	for i := range 4 {
		out = append(out, turn)
		turn = append(slices.Clone(turn), prompt(pageTokens-3+7*i, 30+i)...)
	}
	system := prompt(3*pageTokens+2, 41)
	for i := range 3 {
		out = append(out, append(slices.Clone(system), prompt(9+5*i, 50+i)...))
	}
	base := prompt(5*pageTokens+1, 61)
	for _, n := range []int{2*pageTokens - 1, 2 * pageTokens, 2*pageTokens + 1, 3 * pageTokens, 3*pageTokens + 1} {
		out = append(out, slices.Clone(base[:n]))
	}
	// Exactly page-aligned repeats: decode holds every prompt page, so
	// nothing crosses the wire.
	out = append(out, slices.Clone(base[:3*pageTokens]))
	return out
}

// TestPrefillDecodeCacheEquivalence: through P/D with a cache domain, over
// tcp and shm, every answer equals the no-cache reference token for token
// while decode's ticket names the pages it holds, only the others cross
// the wire, prefill reuses its own sealed pages, and decode seals what it
// received. A second domain sending the same prompts shares nothing: the
// pools hold a copy per domain.
func TestPrefillDecodeCacheEquivalence(t *testing.T) {
	prompts := conversations()
	sp := greedy(5)
	want := runReference(t, prompts, sp)
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) {
			s := pd{
				prefill: startWorker(t, testConfig(t, config.RolePrefill, backend, 4*testPages)),
				decode:  startWorker(t, testConfig(t, config.RoleDecode, backend, 4*testPages)),
			}
			sent, full := 0, 0
			sealed := map[string]int{}
			for _, tenant := range []string{"a", "b"} {
				domain := hexDomain(tenant)
				onDecode, onPrefill := pageHits{}, pageHits{}
				for i, p := range prompts {
					what := fmt.Sprintf("%s: prompt %d (%d tokens)", tenant, i, len(p))
					r, tk := s.runCached(t, domain, owner(tenant, fmt.Sprint("r", i), 1), p, sp)
					if r.prefillErr != nil {
						t.Fatalf("%s: Prefill: %v", what, r.prefillErr)
					}
					checkAgainst(t, what, r.gen, want[i])
					if r.prefill.GetFirstToken() != want[i].tokens[0] {
						t.Errorf("%s: first token %d, want %d", what, r.prefill.GetFirstToken(), want[i].tokens[0])
					}
					pages := (len(p) + pageTokens - 1) / pageTokens
					held := onDecode.hit(p, len(p))
					if int(tk.GetHeldPages()) != held || int(r.prefill.GetPagesSent()) != pages-held ||
						r.prefill.GetBytesSent() != int64((pages-held)*tinyPageSize) {
						t.Errorf("%s: ticket holds %d pages, %d sent (%d bytes); want %d held of %d",
							what, tk.GetHeldPages(), r.prefill.GetPagesSent(), r.prefill.GetBytesSent(), held, pages)
					}
					if got, want := r.prefill.GetCachedTokens(), int64(onPrefill.hit(p, len(p)-1)*pageTokens); got != want {
						t.Errorf("%s: prefill reused %d tokens, want %d", what, got, want)
					}
					onDecode.add(p)
					onPrefill.add(p)
					sent += int(r.prefill.GetPagesSent())
					full += pages
				}
				sealed[tenant] = len(onDecode)
			}
			if sent >= full {
				t.Errorf("%d pages sent for %d prompt pages: the cache saved nothing", sent, full)
			}
			t.Logf("%s: %d of %d prompt pages crossed the wire", backend, sent, full)
			waitQuiet(t, s.prefill, s.decode)
			// Two domains, the same prompts: a copy each, on both workers.
			for _, w := range []*started{s.prefill, s.decode} {
				st := w.rt.Pool.Stats()
				if st.Cached != sealed["a"]+sealed["b"] || sealed["a"] != sealed["b"] {
					t.Errorf("worker %s caches %d pages, want %d per domain × 2", w.id, st.Cached, sealed["a"])
				}
			}
		})
	}
}

// TestPrefillDecodeCacheOwnerChecks: decode shares held pages only with a
// sequence that presents their tags, computed from its own prompt and
// domain (I3). A Generate whose prompt differs from the Reserve's, or
// whose domain has one bit flipped, is refused as an owner violation
// without a token — never decoded from the other prefix's pages.
func TestPrefillDecodeCacheOwnerChecks(t *testing.T) {
	s := startPD(t, config.TransferTCP)
	domain := hexDomain("a")
	p := prompt(3*pageTokens+4, 71)
	sp := greedy(3)
	want := runReference(t, [][]int32{p}, sp)[0]
	r, _ := s.runCached(t, domain, owner("a", "prime", 1), p, sp)
	checkAgainst(t, "prime", r.gen, want)
	waitQuiet(t, s.prefill, s.decode)

	other := slices.Clone(p)
	other[pageTokens+2]++ // same length, second page differs
	for _, c := range []struct {
		name   string
		tamper func(e *entry, gen []int32) []int32
	}{
		{"prompt differs from the reservation's", func(e *entry, gen []int32) []int32 { return other }},
		{"domain bit flipped", func(e *entry, gen []int32) []int32 { e.prefix.Domain[3] ^= 0x04; return gen }},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := s.decode.rt.Pool.Stats().Violations
			ctx := metadata.AppendToOutgoingContext(context.Background(), cachekey.MetadataDomain, domain)
			o := owner("a", "tampered-"+c.name[:6], 1)
			res, err := s.decode.client.Reserve(ctx, &controlpb.ReserveRequest{
				Owner: o, PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + 3, Prompt: p,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.GetTicket().GetHeldPages() != 3 {
				t.Fatalf("ticket holds %d pages, want 3", res.GetTicket().GetHeldPages())
			}
			s.decode.mu.Lock()
			gen := c.tamper(s.decode.reqs[reqKey{"a", o.GetRequestId()}], p)
			s.decode.mu.Unlock()
			var wg sync.WaitGroup
			wg.Go(func() {
				s.prefill.client.Prefill(ctx, &controlpb.PrefillRequest{Owner: o, Prompt: gen, Sampling: sp, Ticket: res.GetTicket()})
			})
			stream, err := s.decode.client.Generate(ctx, &controlpb.GenerateRequest{Owner: o, Prompt: gen, Sampling: sp, Ticket: res.GetTicket()})
			out := collect(t, stream, err)
			wg.Wait()
			if out.err == nil || len(out.tokens) > 0 {
				t.Fatalf("tampered request got %v tokens, err %v; want an owner violation and none", out.tokens, out.err)
			}
			if got := s.decode.rt.Pool.Stats().Violations; got != before+1 {
				t.Errorf("violations %d → %d, want one more", before, got)
			}
			waitQuiet(t, s.prefill, s.decode)
		})
	}
}

// TestReservePromptMustMatch: a Reserve whose prompt is not prompt_tokens
// long is refused before anything is reserved.
func TestReservePromptMustMatch(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages))
	ctx := metadata.AppendToOutgoingContext(context.Background(), cachekey.MetadataDomain, hexDomain("a"))
	_, err := w.client.Reserve(ctx, &controlpb.ReserveRequest{
		Owner: owner("a", "short", 1), PromptTokens: 20, TotalTokens: 30, Prompt: prompt(19, 1),
	})
	if code(err) != codes.InvalidArgument {
		t.Fatalf("Reserve with a 19-token prompt for 20 prompt_tokens: %v, want InvalidArgument", err)
	}
	if s := w.rt.Pool.Stats(); s.Free != s.Total {
		t.Fatalf("pool after the refusal: %+v", s)
	}
}
