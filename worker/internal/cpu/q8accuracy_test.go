package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// q8AccuracyEnv names the shapes TestQ8Accuracy measures, comma-separated
// (small, 1b); unset, the test is skipped: it is a measurement, minutes
// long, reported in docs/BENCHMARKS.md, not a check.
const q8AccuracyEnv = "WARDEN_Q8_ACCURACY"

// q8Shape is one model measured by TestQ8Accuracy.
type q8Shape struct {
	dtype          model.DType
	prompts, chunk int // prompts of chunk·positions tokens
	positions      int // scored positions per prompt (one per chunk)
	// baseline also measures the weights rounded to bfloat16 against
	// float32: how often plain 16-bit rounding alone moves the argmax of
	// this random-weight model, the yardstick for q8's figure.
	baseline bool
	config   func() model.Config
}

var q8Shapes = map[string]q8Shape{
	"small": {model.F32, 200, 8, 4, true, func() model.Config {
		c, _ := model.PresetConfig(model.PresetSmall)
		return c
	}},
	// The shape of Llama 3.2 1B, random weights in bfloat16.
	"1b": {model.BF16, 200, 4, 1, false, func() model.Config {
		c, _ := model.PresetConfig(model.PresetSmall)
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 2048, 8192, 16
		c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 32, 8, 64
		c.VocabSize, c.MaxPositionEmbeddings = 128256, 2048
		c.RopeTheta = 500000
		return c
	}},
}

// TestQ8Accuracy compares the Q8 engine with the float32 one (for a 16-bit
// file: its exact widening) on random prompts: the agreement of the
// next-token argmax and the mean KL divergence KL(p_f32 ‖ p_q8), at one
// position per prefill chunk.
func TestQ8Accuracy(t *testing.T) {
	names := os.Getenv(q8AccuracyEnv)
	if names == "" {
		t.Skipf("set %s=small,1b to measure", q8AccuracyEnv)
	}
	for _, name := range strings.Split(names, ",") {
		sh, ok := q8Shapes[name]
		if !ok {
			t.Fatalf("unknown shape %q", name)
		}
		cfg := sh.config()
		cfg.BOSTokenID, cfg.EOSTokenIDs = nil, []int32{0}
		dir := t.TempDir()
		if err := model.WriteRandom(dir, cfg, 1, sh.dtype); err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		spec := SpecFor(&m.Config)
		const pt = 16
		tokens := sh.chunk * sh.positions
		pages := (tokens + pt - 1) / pt
		f32, err := WeightsOf(m)
		if err != nil {
			t.Fatal(err)
		}
		q8 := QuantizeQ8(f32)
		backend := func(w Weights) *Backend {
			b, err := New(spec, w, newTestPages(pages, spec.PageBytes(pt)), Options{Threads: 2, MaxBatchTokens: sh.chunk, PageTokens: pt})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		candidates := map[string]Weights{"q8": q8}
		if sh.baseline {
			candidates["bf16-rounded"] = narrowedBF16(f32)
		}
		ref := backend(f32)
		for cname, cw := range candidates {
			b := backend(cw)
			agree, n, kl := compareBackends(t, ref, b, sh, spec.Vocab, pages)
			b.Close()
			msg := fmt.Sprintf("%s vs %s, %s shape (%.0fM parameters): top-1 agreement %d/%d = %.2f%%, mean KL %.3g nats over %d prompts",
				cname, sh.dtype, name, float64(m.Config.NumParameters())/1e6, agree, n, 100*float64(agree)/float64(n), kl/float64(n), sh.prompts)
			t.Log(msg)
			fmt.Println(msg)
		}
		ref.Close()
		m.Close()
	}
}

// compareBackends runs the same random prompts through ref and b and
// returns the number of scored positions whose argmax agrees, their
// count, and the summed KL(p_ref ‖ p_b).
func compareBackends(t *testing.T, ref, b *Backend, sh q8Shape, vocab, pages int) (agree, n int, kl float64) {
	r := rand.New(rand.NewPCG(1, 2))
	tokens := sh.chunk * sh.positions
	for i := range sh.prompts {
		if i > 0 && i%50 == 0 { // progress, for runs on a loaded machine
			fmt.Printf("  after %d prompts: top-1 agreement %d/%d, mean KL %.3g\n", i, agree, n, kl/float64(n))
		}
		prompt := randTokens(r, tokens, vocab)
		for start := 0; start < tokens; start += sh.chunk {
			lf, lq := make([]float32, vocab), make([]float32, vocab)
			for _, run := range []struct {
				b      *Backend
				logits []float32
			}{{ref, lf}, {b, lq}} {
				c := engine.Chunk{Tokens: prompt[start : start+sh.chunk], Start: start, Pages: pageIDs(0, pages), Logits: run.logits}
				if err := run.b.Forward(context.Background(), []engine.Chunk{c}); err != nil {
					t.Fatal(err)
				}
			}
			if kernels.ArgMax(lf) == kernels.ArgMax(lq) {
				agree++
			}
			kl += klDivergence(lf, lq)
			n++
		}
	}
	return agree, n, kl
}

// klDivergence returns KL(softmax(p) ‖ softmax(q)) in float64.
func klDivergence(p, q []float32) float64 {
	lp, lq := logSoftmax(p), logSoftmax(q)
	var kl float64
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return kl
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(x))
	lse := mx + math.Log(s)
	for i, v := range x {
		out[i] = float64(v) - lse
	}
	return out
}
