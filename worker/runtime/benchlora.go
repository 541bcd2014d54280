package runtime

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/adapters"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// LoRABenchOptions shape the LoRA benchmark.
type LoRABenchOptions struct {
	// Adapters is how many different adapters the batch mixes; Rank
	// their r (every projection targeted).
	Adapters, Rank int
	// Batch is the number of sequences (sequence i runs under adapter
	// i mod Adapters); PromptTokens their prompt, DecodeTokens what each
	// generates.
	Batch, PromptTokens, DecodeTokens int
	// Rounds alternates base and adapter runs this many times; the best
	// of each is reported.
	Rounds int
	// BF16 draws adapters whose values are all bfloat16 (as PEFT saves an
	// adapter trained in bf16), which the cpu backend holds in bf16.
	BF16 bool
}

// LoRABenchReport compares a batch mixing adapters with the same batch on
// the base model, measured in the same run, and the cost of loading one
// adapter.
type LoRABenchReport struct {
	Adapters, Rank, Batch int
	BF16                  bool
	// AdapterBytes is one adapter's size in the adapter memory.
	AdapterBytes int64
	// Load is the time to load one adapter (hash, parse, checks against
	// the model, the backend's form): adapters.Memory.Load.
	Load time.Duration
	// Prefill and decode throughput in tokens per second.
	BasePrefill, LoRAPrefill float64
	BaseDecode, LoRADecode   float64
}

// DecodeRatio is the adapter batch's decode throughput over the base
// model's (goal ≥ 0.8).
func (r LoRABenchReport) DecodeRatio() float64 { return r.LoRADecode / r.BaseDecode }

// PrefillRatio is the same for prefill.
func (r LoRABenchReport) PrefillRatio() float64 { return r.LoRAPrefill / r.BasePrefill }

// WriteTable prints the report as a Markdown table.
func (r LoRABenchReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| figure | value |\n|---|---|\n")
	dt := "f32"
	if r.BF16 {
		dt = "bf16"
	}
	fmt.Fprintf(w, "| batch | %d sequences, %d adapters of rank %d (all projections, %s values) |\n", r.Batch, r.Adapters, r.Rank, dt)
	fmt.Fprintf(w, "| adapter size | %.2f MB |\n", float64(r.AdapterBytes)/1e6)
	fmt.Fprintf(w, "| load one adapter | %.1f ms |\n", float64(r.Load.Microseconds())/1e3)
	fmt.Fprintf(w, "| prefill, base / adapters | %.1f / %.1f tokens/s = **%.2f×** |\n", r.BasePrefill, r.LoRAPrefill, r.PrefillRatio())
	fmt.Fprintf(w, "| decode, base / adapters | %.1f / %.1f tokens/s = **%.2f×** (goal ≥ 0.8×) |\n", r.BaseDecode, r.LoRADecode, r.DecodeRatio())
}

// BenchLoRA loads opt.Adapters random adapters into an adapter memory
// (timing each load) and runs the same batch on the base model and mixed
// over the adapters, alternating, opt.Rounds times. Run must be running
// on r.
func (r *Runtime) BenchLoRA(ctx context.Context, opt LoRABenchOptions) (LoRABenchReport, error) {
	rep := LoRABenchReport{Adapters: opt.Adapters, Rank: opt.Rank, Batch: opt.Batch, BF16: opt.BF16}
	if opt.Adapters < 1 || opt.Rank < 1 || opt.Batch < 1 || opt.PromptTokens < 1 || opt.DecodeTokens < 2 || opt.Rounds < 1 {
		return rep, fmt.Errorf("runtime: bench lora needs adapters, rank, batch, prompt and rounds ≥ 1 and decode ≥ 2")
	}
	if r.PrepareAdapter == nil {
		return rep, fmt.Errorf("runtime: bench lora: the backend serves no LoRA adapters")
	}
	c := &r.Model.Config
	mem := adapters.New(1<<40, c, r.PrepareAdapter)
	ads := make([]engine.Adapter, opt.Adapters)
	for i := range ads {
		cj, w, err := benchAdapter(c, opt, uint64(i+1))
		if err != nil {
			return rep, err
		}
		ref := &controlpb.AdapterRef{Name: fmt.Sprint("bench:", i), Hash: lora.Hash(cj, w)}
		start := time.Now()
		n, err := mem.Load(ctx, ref, cj, w, false)
		if err != nil {
			return rep, err
		}
		d := time.Since(start)
		if i == 0 || d < rep.Load {
			rep.Load = d
		}
		rep.AdapterBytes = n
		h, err := mem.Acquire(ref.Hash)
		if err != nil {
			return rep, err
		}
		defer h.Release()
		ads[i] = h.Adapter()
	}
	prompt := BenchPromptIDs(opt.PromptTokens, c.VocabSize)
	for range opt.Rounds {
		for _, under := range [][]engine.Adapter{nil, ads} {
			pre, err := r.prefillRate(ctx, prompt, opt.Batch, under)
			if err != nil {
				return rep, err
			}
			dec, _, err := r.decodeRate(ctx, prompt, opt.Batch, opt.DecodeTokens, under)
			if err != nil {
				return rep, err
			}
			if under == nil {
				rep.BasePrefill, rep.BaseDecode = max(rep.BasePrefill, pre), max(rep.BaseDecode, dec)
			} else {
				rep.LoRAPrefill, rep.LoRADecode = max(rep.LoRAPrefill, pre), max(rep.LoRADecode, dec)
			}
		}
	}
	return rep, nil
}

// benchAdapter draws one adapter's files: rank opt.Rank on every
// projection, values rounded to bfloat16 with opt.BF16.
func benchAdapter(c *model.Config, opt LoRABenchOptions, seed uint64) (configJSON, weights []byte, err error) {
	cj, w, err := lora.Random(c, lora.Config{Rank: opt.Rank, Alpha: 2 * float64(opt.Rank), Targets: lora.Modules[:]}, 0.02, seed)
	if err != nil || !opt.BF16 {
		return cj, w, err
	}
	a, err := lora.Parse(cj, w, c)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range a.Layers {
		for _, p := range l {
			for _, v := range [][]float32{p.A, p.B} {
				u := make([]uint16, len(v))
				kernels.F32ToBF16(u, v)
				kernels.BF16ToF32(v, u)
			}
		}
	}
	return lora.Encode(a.Config, a.Layers)
}

// prefillRate submits batch copies of prompt at once, sequence i under
// adapters[i%len(adapters)] (none: the base model), and returns the
// prompt tokens prefilled per second until the last first token.
func (r *Runtime) prefillRate(ctx context.Context, prompt []int32, batch int, adapters []engine.Adapter) (float64, error) {
	errs := make(chan error, batch)
	start := time.Now()
	for i := range batch {
		var ad engine.Adapter
		if len(adapters) > 0 {
			ad = adapters[i%len(adapters)]
		}
		go func() {
			_, _, err := r.generate(ctx, fmt.Sprint("prefill-", i), prompt, 1, true, ad)
			errs <- err
		}()
	}
	for range batch {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return float64(batch*len(prompt)) / time.Since(start).Seconds(), nil
}
