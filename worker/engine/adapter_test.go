package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/kvpool"
)

// adapter draws a LoRA adapter for the rig's model, prepares it on the
// rig's backend (requests whose owner names its hash run under it) and
// returns it parsed, for the reference.
func (r *rig) adapter(t *testing.T, c lora.Config, seed uint64) *lora.Adapter {
	t.Helper()
	cj, w, err := lora.Random(&r.m.Config, c, 0.12, seed)
	if err != nil {
		t.Fatal(err)
	}
	a, err := lora.Parse(cj, w, &r.m.Config)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.be.PrepareAdapter(a)
	if err != nil {
		t.Fatal(err)
	}
	r.adapters[a.Hash] = p
	return a
}

// referenceGreedy is n greedy tokens after p from the float64 forward of
// the rig's model with a merged into its weights (nil: the base model).
func (r *rig) referenceGreedy(a *lora.Adapter, p []int32, n int) []int32 {
	spec := cpu.SpecFor(&r.m.Config)
	seq := slices.Clone(p)
	for range n {
		var logits [][]float64
		if a != nil {
			logits = cpu.ReferenceAdapter(spec, r.w, a, seq)
		} else {
			logits = cpu.Reference(spec, r.w, seq)
		}
		last := logits[len(logits)-1]
		best := 0
		for i, x := range last {
			if x > last[best] {
				best = i
			}
		}
		seq = append(seq, int32(best))
	}
	return seq[len(p):]
}

// adapterDomain is tenant's cache domain for requests under adapter, as
// the gateway derives it.
func adapterDomain(t *testing.T, tenant, adapter string) cachekey.Domain {
	t.Helper()
	d, ok := cachekey.Derive(bytes.Repeat([]byte("k"), cachekey.MinSecretBytes), cachekey.ModeTenant,
		cachekey.Scope{Tenant: tenant, Incarnation: "i1", Adapter: adapter})
	if !ok {
		t.Fatal("no domain")
	}
	return d
}

// TestPrefixNeverCrossesAdapters (DESIGN I8a) with the cpu backend: one
// tenant sends the same prompt under adapter A, adapter B and the base
// model, with the prefix cache warm for each in turn; the three answers
// differ, and each equals the float64 forward with its adapter merged
// into the weights and an uncached run under its own adapter. Whether the caller
// passes each adapter's own domain (as the gateway derives it) or one
// domain for all three, the engine's tags cover the owner's adapter: no
// request reuses another adapter's pages (CachedTokens 0), each seals
// its own copy, and the same adapter again reuses its own. A page sealed
// under A that a request under B is made to read (a reservation looked
// up with A's tags) is an owner violation with no output.
func TestPrefixNeverCrossesAdapters(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4})
	p := prompt(90, 3*pageTokens+2, r.m.Config.VocabSize)
	loraA := r.adapter(t, lora.Config{Rank: 4, Alpha: 8, Targets: lora.Modules[:]}, 1)
	loraB := r.adapter(t, lora.Config{Rank: 8, Alpha: 16, Targets: []lora.Module{lora.Q, lora.V, lora.Down}}, 2)
	adapterA, adapterB := loraA.Hash, loraB.Hash
	adapters := []string{adapterA, adapterB, ""}
	want := [][]int32{r.referenceGreedy(loraA, p, 4), r.referenceGreedy(loraB, p, 4), r.referenceGreedy(nil, p, 4)}
	if slices.Equal(want[0], want[1]) || slices.Equal(want[0], want[2]) || slices.Equal(want[1], want[2]) {
		t.Fatalf("the adapters do not change the reference's greedy tokens: %v", want)
	}
	// Another tenant's, so that its base-model request finds nothing of
	// the first run's.
	shared := adapterDomain(t, "u", "")
	for _, c := range []struct {
		name   string
		domain func(adapter string) cachekey.Domain
	}{
		{"per-adapter domains", func(a string) cachekey.Domain { return adapterDomain(t, "t", a) }},
		{"one domain for every adapter", func(string) cachekey.Domain { return shared }},
	} {
		t.Run(c.name, func(t *testing.T) {
			seals := r.pool.Stats().Seals
			var tags [][]kvpool.Tag
			for i, a := range adapters {
				o := owner(fmt.Sprint(c.name[:3], "-", i))
				o.Adapter = a
				got := r.runCached(t, o, c.domain(a), p, greedy(4))
				if !slices.Equal(got.tokens, want[i]) {
					t.Fatalf("adapter %d: tokens %v, the float64 forward with the adapter merged %v", i, got.tokens, want[i])
				}
				ref := owner(fmt.Sprint(c.name[:3], "-ref-", i))
				ref.Adapter = a
				if want := r.run(t, ref, p, greedy(4)); !slices.Equal(got.tokens, want.tokens) {
					t.Fatalf("adapter %d: tokens %v, uncached reference under the same adapter %v", i, got.tokens, want.tokens)
				}
				if got.res.CachedTokens != 0 {
					t.Fatalf("the request under adapter %d reused %d tokens of another adapter's pages", i, got.res.CachedTokens)
				}
				tg := kvpool.Tags(c.domain(a), 1, a, p[:len(p)-1], pageTokens)
				if r.pool.Lookup(tg) != 3 {
					t.Fatalf("adapter %d's own pages are not sealed under its tags", i)
				}
				for j, prev := range tags {
					if prev[0] == tg[0] {
						t.Fatalf("adapters %d and %d compute the same tags", j, i)
					}
				}
				tags = append(tags, tg)
			}
			if got := r.pool.Stats().Seals - seals; got != 9 {
				t.Fatalf("%d pages sealed, want 3 copies of 3 pages", got)
			}
			for i, a := range adapters {
				o := owner(fmt.Sprint(c.name[:3], "-again-", i))
				o.Adapter = a
				if again := r.runCached(t, o, c.domain(a), p, greedy(4)); again.res.CachedTokens != 3*pageTokens {
					t.Fatalf("adapter %d reused %d tokens of its own pages, want %d", i, again.res.CachedTokens, 3*pageTokens)
				}
			}
		})
	}

	// Adapter A's sealed pages spliced into a request under B (or the
	// base model) in the shared domain: the engine presents its own tags,
	// computed under its owner's adapter, and refuses before any step.
	tagsA := kvpool.Tags(shared, 1, adapterA, p[:len(p)-1], pageTokens)
	for _, other := range []string{adapterB, ""} {
		o := owner("spliced-" + other[:min(len(other), 1)])
		o.Adapter = other
		pages, hit, err := r.pool.ReservePrefix(o, len(p)+4, tagsA)
		if err != nil || hit != 3 {
			t.Fatalf("hit %d, %v", hit, err)
		}
		if err := r.pool.Activate(o); err != nil {
			t.Fatal(err)
		}
		expectViolation(t, r, engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: greedy(4),
			Prefix: &engine.Prefix{Domain: shared, Version: 1, Hit: hit}})
		if _, err := r.pool.Release(o); err != nil {
			t.Fatal(err)
		}
	}
	// Pages reserved and prefilled under A, run by the same tenant and
	// request under B: the engine's owner check refuses them before any
	// step (kvpool.ReasonForeignAdapter).
	underA := owner("own")
	underA.Adapter = adapterA
	pages, err := r.pool.Reserve(underA, len(p)+4)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pool.Activate(underA); err != nil {
		t.Fatal(err)
	}
	underB := underA
	underB.Adapter = adapterB
	expectViolation(t, r, engine.Request{Owner: underB, Pages: pages, Prompt: p, Sampling: greedy(4)})
	var v *kvpool.ViolationError
	if err := r.pool.Verify(underB, pages, 0); !errors.As(err, &v) || v.Reason != kvpool.ReasonForeignAdapter {
		t.Fatalf("adapter A's pages verified under B: %v, want foreign_adapter", err)
	}
	if _, err := r.pool.Release(underA); err != nil {
		t.Fatal(err)
	}
	if s := r.pool.Stats(); s.Reserved+s.InUse != 0 {
		t.Fatalf("pool after the runs: %+v", s)
	}
}
