//go:build cuda

package cuda

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

const testPageTokens = 16

// openTiny writes and loads the tiny preset in dtype.
func openTiny(t *testing.T, dtype model.DType) *model.Model {
	t.Helper()
	return openTinyFamily(t, "llama", dtype)
}

// newGPU builds a cuda backend over m with a pool of pages pages (q8
// weights when q8).
func newGPU(t *testing.T, m *model.Model, pages int, poolCfg kvpool.Config, q8 bool) (*Backend, *kvpool.Pool) {
	t.Helper()
	b, err := FromModel(m, Options{MaxBatchTokens: 96, MaxLogitRows: 2, PageTokens: testPageTokens, Quantize: q8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	poolCfg.Pages, poolCfg.PageTokens = pages, testPageTokens
	poolCfg.PageBytes = cpu.SpecFor(&m.Config).PageBytes(testPageTokens)
	pool, err := b.NewPool(poolCfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, pool
}

// newCPU builds the reference cpu backend over m with its own pool (q8
// weights when q8).
func newCPU(t *testing.T, m *model.Model, pages int, q8 bool) (*cpu.Backend, *kvpool.Pool) {
	t.Helper()
	pageBytes := cpu.SpecFor(&m.Config).PageBytes(testPageTokens)
	pool, err := kvpool.New(kvpool.Config{Pages: pages, PageTokens: testPageTokens, PageBytes: pageBytes})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cpu.FromModel(m, pool, cpu.Options{Threads: 2, MaxBatchTokens: 96, PageTokens: testPageTokens, Quantize: q8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, pool
}

// seq is a sequence driven the way the engine drives one.
type seq struct {
	owner  kvpool.Owner
	pages  []kvpool.PageID
	prompt []int32
	pos    int
	next   int32 // decode input
	// forced, when set, are the decode inputs instead of the greedy
	// tokens (teacher forcing: another backend's tokens).
	forced []int32
	tokens []int32
	logits []float32
	// adapter is the LoRA adapter the sequence runs under, nil for the
	// base model.
	adapter engine.Adapter
}

func newSeq(t *testing.T, pool *kvpool.Pool, tenant, request string, prompt []int32, maxNew int) *seq {
	t.Helper()
	return newSeqUnder(t, pool, tenant, request, prompt, maxNew, nil)
}

// newSeqUnder is newSeq under adapter ad (nil: the base model).
func newSeqUnder(t *testing.T, pool *kvpool.Pool, tenant, request string, prompt []int32, maxNew int, ad engine.Adapter) *seq {
	t.Helper()
	o := kvpool.Owner{Tenant: tenant, Request: request, Epoch: 1}
	if ad != nil {
		o.Adapter = ad.Hash()
	}
	pages, err := pool.Reserve(o, len(prompt)+maxNew)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	return &seq{owner: o, pages: pages, prompt: prompt, adapter: ad}
}

// chunk returns the sequence's next chunk: up to limit prompt tokens, or
// its decode token.
func (s *seq) chunk(limit, vocab int) engine.Chunk {
	c := engine.Chunk{Owner: s.owner, Start: s.pos, Pages: s.pages, Adapter: s.adapter}
	if s.pos < len(s.prompt) {
		end := min(len(s.prompt), s.pos+limit)
		c.Tokens = s.prompt[s.pos:end]
		if end == len(s.prompt) {
			c.Logits = make([]float32, vocab)
		}
	} else {
		c.Tokens = []int32{s.next}
		c.Logits = make([]float32, vocab)
	}
	return c
}

// step runs one engine-like step of seqs on be: verify, forward, mark
// written, sample greedily. It returns the chunks it ran.
func step(t *testing.T, be engine.Backend, pool *kvpool.Pool, seqs []*seq, limits []int) []engine.Chunk {
	t.Helper()
	batch := make([]engine.Chunk, len(seqs))
	for i, s := range seqs {
		batch[i] = s.chunk(limits[i], be.VocabSize())
		if err := pool.Verify(s.owner, s.pages, s.pos); err != nil {
			t.Fatal(err)
		}
	}
	if err := be.Forward(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		c := batch[i]
		s.pos = c.Start + len(c.Tokens)
		if err := pool.MarkTokensWritten(s.owner, s.pages, s.pos); err != nil {
			t.Fatal(err)
		}
		s.logits = c.Logits
		if c.Logits != nil {
			s.next = argmax(c.Logits)
			s.tokens = append(s.tokens, s.next)
			if len(s.forced) > 0 {
				s.next = s.forced[len(s.tokens)-1]
			}
		}
	}
	return batch
}

// runAll steps seqs on be until each has generated decode tokens (a
// sequence leaves the batch when it has) and returns each one's logits
// outputs in order.
func runAll(t *testing.T, be engine.Backend, pool *kvpool.Pool, seqs []*seq, limits []int, decode int) [][][]float32 {
	t.Helper()
	outs := make([][][]float32, len(seqs))
	for {
		var active []*seq
		var lim, idx []int
		for i, s := range seqs {
			if len(s.tokens) < decode {
				active, lim, idx = append(active, s), append(lim, limits[i]), append(idx, i)
			}
		}
		if len(active) == 0 {
			return outs
		}
		step(t, be, pool, active, lim)
		for j, s := range active {
			if s.logits != nil {
				outs[idx[j]] = append(outs[idx[j]], s.logits)
			}
		}
	}
}

// argmax is the engine's greedy rule: NaNs skipped, lowest index on ties.
func argmax(x []float32) int32 {
	best := -1
	for i, v := range x {
		if v != v {
			continue
		}
		if best < 0 || v > x[best] {
			best = i
		}
	}
	return int32(max(best, 0))
}

func testPrompt(n, vocab int, salt int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*7919 + salt*31 + 13) % vocab)
	}
	return p
}

// maxDiff returns max |a-b| and max |b|.
func maxDiff(a, b []float32) (diff, mag float64) {
	for i := range a {
		diff = max(diff, math.Abs(float64(a[i])-float64(b[i])))
		mag = max(mag, math.Abs(float64(b[i])))
	}
	return diff, mag
}

// logSoftmax returns log(softmax(x)) in float64 (what logprobs report).
func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - mx - math.Log(sum)
	}
	return out
}

// maxDiff64 returns max |a-b|.
func maxDiff64(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// TestGreedyMatchesCPU runs two sequences of different tenants, prefilled
// in chunks and decoded together, on the cpu and the cuda backend, for
// every model family (Qwen2's q/k/v biases, Qwen3's q/k norms): the
// logits and their log-softmax (logprobs) agree within float tolerance
// and the greedy tokens are equal.
func TestGreedyMatchesCPU(t *testing.T) {
	type run struct {
		family string
		dt     model.DType
	}
	// F16 and BF16 weights stay 16-bit on the device (widened in the
	// linear kernel).
	runs := []run{{"llama", model.F32}, {"llama", model.F16}}
	for _, f := range model.FamilyNames() {
		runs = append(runs, run{f, model.BF16})
	}
	for _, rc := range runs {
		dt := rc.dt
		t.Run(rc.family+"/"+string(dt), func(t *testing.T) {
			m := openTinyFamily(t, rc.family, dt)
			vocab := m.Config.VocabSize
			cb, cpool := newCPU(t, m, 16, false)
			gb, gpool := newGPU(t, m, 16, kvpool.Config{}, false)
			const decode = 24
			mk := func(pool *kvpool.Pool) []*seq {
				return []*seq{
					newSeq(t, pool, "tenant-a", "req-1", testPrompt(37, vocab, 1), decode),
					newSeq(t, pool, "tenant-b", "req-1", testPrompt(20, vocab, 2), decode),
				}
			}
			cs, gs := mk(cpool), mk(gpool)
			limits := []int{16, 11}
			cOut := runAll(t, cb, cpool, cs, limits, decode)
			gOut := runAll(t, gb, gpool, gs, limits, decode)
			worst, worstLP := 0.0, 0.0
			for i := range cs {
				for j := range cOut[i] {
					diff, mag := maxDiff(gOut[i][j], cOut[i][j])
					if diff > 1e-4*(1+mag) {
						t.Fatalf("sequence %d output %d: logits differ by %g (largest %g)", i, j, diff, mag)
					}
					worst = max(worst, diff/(1+mag))
					// The engine's host sampler derives logprobs from these
					// logits: their log-softmax agrees too.
					lp := maxDiff64(logSoftmax(gOut[i][j]), logSoftmax(cOut[i][j]))
					if lp > 2e-4*(1+mag) {
						t.Fatalf("sequence %d output %d: logprobs differ by %g", i, j, lp)
					}
					worstLP = max(worstLP, lp)
				}
				for j := range cs[i].tokens {
					if cs[i].tokens[j] != gs[i].tokens[j] {
						t.Fatalf("sequence %d token %d: %d on cuda, %d on cpu", i, j, gs[i].tokens[j], cs[i].tokens[j])
					}
				}
			}
			t.Logf("EQUIV %s/%s tokens=%d max_logit_rel_diff=%.3g max_logprob_abs_diff=%.3g", rc.family, dt,
				len(cs[0].tokens)+len(cs[1].tokens), worst, worstLP)
		})
	}
}

// TestBatchInvariance checks the determinism contract on the device: a
// sequence's logits are bit-identical whether its prompt is one chunk or
// several, alone or batched with others (with more logit rows than one
// LM-head pass holds); and Greedy returns the argmax of Forward's logits.
func TestBatchInvariance(t *testing.T) {
	m := openTiny(t, model.BF16)
	vocab := m.Config.VocabSize
	gb, pool := newGPU(t, m, 32, kvpool.Config{}, false)
	const decode = 8
	prompt := testPrompt(37, vocab, 3)

	alone := newSeq(t, pool, "t", "alone", prompt, decode)
	ref := runAll(t, gb, pool, []*seq{alone}, []int{64}, decode)[0]
	crowd := []*seq{
		newSeq(t, pool, "t", "crowded", prompt, decode),
		newSeq(t, pool, "u", "other-1", testPrompt(29, vocab, 4), decode),
		newSeq(t, pool, "v", "other-2", testPrompt(5, vocab, 5), decode),
	}
	got := runAll(t, gb, pool, crowd, []int{7, 13, 3}, decode)[0]
	for i := range ref {
		for j := range ref[i] {
			if math.Float32bits(ref[i][j]) != math.Float32bits(got[i][j]) {
				t.Fatalf("output %d logit %d: %g alone, %g batched and chunked", i, j, ref[i][j], got[i][j])
			}
		}
	}

	// Greedy: same tokens as the argmax of Forward's logits.
	g := newSeq(t, pool, "t", "greedy", prompt, decode)
	var toks []int32
	for len(toks) < decode {
		c := g.chunk(64, vocab)
		next := []int32{-1}
		if err := gb.Greedy(context.Background(), []engine.Chunk{c}, next); err != nil {
			t.Fatal(err)
		}
		g.pos = c.Start + len(c.Tokens)
		if err := pool.MarkTokensWritten(g.owner, g.pages, g.pos); err != nil {
			t.Fatal(err)
		}
		if c.Logits != nil {
			g.next = next[0]
			toks = append(toks, next[0])
		}
	}
	for i, tok := range toks {
		if tok != alone.tokens[i] {
			t.Fatalf("Greedy token %d = %d, argmax of Forward's logits %d", i, tok, alone.tokens[i])
		}
	}
}

// corruptTag overwrites page id's device tag behind the mirror's back.
func corruptTag(t *testing.T, b *Backend, id kvpool.PageID) {
	t.Helper()
	b.mirror.mu.Lock()
	tag := b.mirror.tags[id]
	b.mirror.mu.Unlock()
	tag.Hash ^= 1
	err := b.dev.do(func() error {
		return cu.MemcpyHtoD(b.tagsDev+cu.DevicePtr(int(id)*int(unsafe.Sizeof(devTag{}))), unsafe.Pointer(&tag), int64(unsafe.Sizeof(tag)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOwnerViolation checks that the device refuses what the host check
// would: a corrupted device tag, a foreign page in the table, an unwritten
// slot. Each step fails with kvpool.ErrOwnerViolation and delivers nothing.
func TestOwnerViolation(t *testing.T) {
	m := openTiny(t, model.F32)
	vocab := m.Config.VocabSize
	const sentinel = float32(12345)
	cases := []struct {
		name   string
		reason kvpool.Reason
		// setup prefills a and returns the decode chunk to run.
		setup func(t *testing.T, b *Backend, pool *kvpool.Pool, a *seq) engine.Chunk
	}{
		{"corrupted device tag", kvpool.ReasonForeignRequest, func(t *testing.T, b *Backend, pool *kvpool.Pool, a *seq) engine.Chunk {
			step(t, b, pool, []*seq{a}, []int{64})
			corruptTag(t, b, a.pages[0])
			return a.chunk(1, vocab)
		}},
		{"foreign page in the table", kvpool.ReasonForeignTenant, func(t *testing.T, b *Backend, pool *kvpool.Pool, a *seq) engine.Chunk {
			other := newSeq(t, pool, "tenant-z", "victim", testPrompt(20, vocab, 9), 4)
			step(t, b, pool, []*seq{other}, []int{64})
			step(t, b, pool, []*seq{a}, []int{64})
			c := a.chunk(1, vocab)
			c.Pages = append([]kvpool.PageID{a.pages[0]}, other.pages[0])
			c.Start, c.Tokens = 16, []int32{1} // reads position 0..15 of page a0, writes into the victim's page
			return c
		}},
		{"unwritten slot", kvpool.ReasonUnwritten, func(t *testing.T, b *Backend, pool *kvpool.Pool, a *seq) engine.Chunk {
			c := a.chunk(64, vocab)
			c.Logits = nil
			if err := b.Forward(context.Background(), []engine.Chunk{c}); err != nil {
				t.Fatal(err)
			}
			// No MarkTokensWritten: the prompt's slots are not written for a.
			a.pos = len(a.prompt)
			return a.chunk(1, vocab)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, pool := newGPU(t, m, 16, kvpool.Config{}, false)
			a := newSeq(t, pool, "tenant-a", "req", testPrompt(20, vocab, 8), 4)
			c := tc.setup(t, b, pool, a)
			for i := range c.Logits {
				c.Logits[i] = sentinel
			}
			err := b.Forward(context.Background(), []engine.Chunk{c})
			var ve *kvpool.ViolationError
			if !errors.Is(err, kvpool.ErrOwnerViolation) || !errors.As(err, &ve) {
				t.Fatalf("step error %v, want a kvpool.ErrOwnerViolation", err)
			}
			if ve.Reason != tc.reason {
				t.Errorf("reason %v, want %v (%v)", ve.Reason, tc.reason, err)
			}
			for i, v := range c.Logits {
				if v != sentinel {
					t.Fatalf("logit %d written (%g) by a refused step", i, v)
				}
			}
			next := []int32{-7}
			if err := b.Greedy(context.Background(), []engine.Chunk{c}, next); !errors.Is(err, kvpool.ErrOwnerViolation) || next[0] != -7 {
				t.Fatalf("Greedy: error %v, next %d; want a violation and no token", err, next[0])
			}
			t.Logf("VIOLATION %s caught: %v", tc.name, err)
		})
	}
}

// TestPageCopies checks ReadPage and WritePage, and that pages are
// portable: KV prefilled on the GPU, copied to a cpu pool, decodes there
// to the GPU's token.
func TestPageCopies(t *testing.T) {
	m := openTiny(t, model.F32)
	vocab := m.Config.VocabSize
	gb, gpool := newGPU(t, m, 16, kvpool.Config{}, false)
	pageBytes := gpool.Capacity().PageBytes
	r := rand.New(rand.NewPCG(13, 14))

	o := kvpool.Owner{Tenant: "t", Request: "copy", Epoch: 1}
	ids, err := gpool.Reserve(o, 1)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, pageBytes)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := gb.WritePage(ids[0], 0, data); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, pageBytes)
	if err := gb.ReadPage(ids[0], 0, back); err != nil {
		t.Fatal(err)
	}
	if string(back) != string(data) {
		t.Fatal("page read back differs from the page written")
	}
	part := []byte("a byte range inside the page")
	if err := gb.WritePage(ids[0], 100, part); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(part)+8)
	if err := gb.ReadPage(ids[0], 96, got); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte(nil), data[96:100]...), part...), data[100+len(part):104+len(part)]...)
	if string(got) != string(want) {
		t.Fatalf("range read %q, want %q", got, want)
	}
	for _, bad := range []struct {
		id  kvpool.PageID
		off int
		n   int
	}{{16, 0, 4}, {-1, 0, 4}, {ids[0], pageBytes - 3, 4}, {ids[0], -1, 4}} {
		if err := gb.ReadPage(bad.id, bad.off, make([]byte, bad.n)); !errors.Is(err, kvpool.ErrInvalid) {
			t.Errorf("ReadPage(%d, %d, %d bytes): error %v, want ErrInvalid", bad.id, bad.off, bad.n, err)
		}
	}
	if _, err := gpool.Release(o); err != nil {
		t.Fatal(err)
	}

	// Prefill on the GPU, move the pages to a cpu pool, decode on both.
	cb, cpool := newCPU(t, m, 16, false)
	g := newSeq(t, gpool, "t", "moved", testPrompt(40, vocab, 6), 2)
	c := newSeq(t, cpool, "t", "moved", g.prompt, 2)
	step(t, gb, gpool, []*seq{g}, []int{64})
	for i, id := range g.pages[:ceilDiv(len(g.prompt), testPageTokens)] {
		if err := gb.ReadPage(id, 0, data); err != nil {
			t.Fatal(err)
		}
		slots := min(testPageTokens, len(g.prompt)-i*testPageTokens)
		if err := cpool.WritePage(c.owner, c.pages[i], 0, data, slots); err != nil {
			t.Fatal(err)
		}
	}
	c.pos, c.next = len(c.prompt), g.next
	step(t, gb, gpool, []*seq{g}, []int{1})
	step(t, cb, cpool, []*seq{c}, []int{1})
	if diff, mag := maxDiff(g.logits, c.logits); diff > 1e-4*(1+mag) || g.next != c.next {
		t.Fatalf("decode after moving pages: token %d on cuda, %d on cpu; logits differ by %g", g.next, c.next, diff)
	}
}

// TestPoolFill checks PoisonOnReserve and ZeroOnRelease on device pages.
func TestPoolFill(t *testing.T) {
	m := openTiny(t, model.F32)
	for _, tc := range []struct {
		name string
		cfg  kvpool.Config
		word uint32
	}{
		{"poison on reserve", kvpool.Config{PoisonOnReserve: true}, kvpool.PoisonWord},
		{"zero on release", kvpool.Config{ZeroOnRelease: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, pool := newGPU(t, m, 4, tc.cfg, false)
			pageBytes := pool.Capacity().PageBytes
			o := kvpool.Owner{Tenant: "t", Request: "old", Epoch: 1}
			ids, err := pool.Reserve(o, 4*testPageTokens)
			if err != nil {
				t.Fatal(err)
			}
			junk := make([]byte, pageBytes)
			for i := range junk {
				junk[i] = 0x5a
			}
			for _, id := range ids {
				if err := b.WritePage(id, 0, junk); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := pool.Release(o); err != nil {
				t.Fatal(err)
			}
			n := kvpool.Owner{Tenant: "u", Request: "new", Epoch: 1}
			if _, err := pool.Reserve(n, testPageTokens); err != nil {
				t.Fatal(err)
			}
			// Every page — reserved by the new owner or free — now shows
			// the fill word, never the old owner's bytes.
			buf := make([]byte, pageBytes)
			for _, id := range ids {
				if err := b.ReadPage(id, 0, buf); err != nil {
					t.Fatal(err)
				}
				words := unsafe.Slice((*uint32)(unsafe.Pointer(&buf[0])), pageBytes/4)
				for i, w := range words {
					if w != tc.word {
						t.Fatalf("page %d word %d = %#x, want %#x", id, i, w, tc.word)
					}
				}
			}
		})
	}
}

// TestBadInput checks host-side validation: clear errors, no launch.
func TestBadInput(t *testing.T) {
	m := openTiny(t, model.F32)
	b, pool := newGPU(t, m, 4, kvpool.Config{}, false)
	a := newSeq(t, pool, "t", "r", testPrompt(4, m.Config.VocabSize, 1), 4)
	for _, tc := range []struct {
		name string
		c    engine.Chunk
	}{
		{"token outside the vocabulary", engine.Chunk{Tokens: []int32{int32(m.Config.VocabSize)}, Pages: a.pages}},
		{"too few pages", engine.Chunk{Tokens: []int32{1}, Start: testPageTokens, Pages: a.pages[:1]}},
		{"empty chunk", engine.Chunk{Pages: a.pages}},
		{"short logits", engine.Chunk{Tokens: []int32{1}, Pages: a.pages, Logits: make([]float32, 3)}},
		{"beyond max positions", engine.Chunk{Tokens: []int32{1}, Start: m.Config.MaxPositionEmbeddings, Pages: a.pages}},
	} {
		if err := b.Forward(context.Background(), []engine.Chunk{tc.c}); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := b.NewPool(kvpool.Config{Pages: 1, PageTokens: testPageTokens, PageBytes: 4}); err == nil {
		t.Error("second NewPool: no error")
	}
}
