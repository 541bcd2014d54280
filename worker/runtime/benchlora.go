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
}

// LoRABenchReport compares a batch mixing adapters with the same batch on
// the base model, measured in the same run, and the cost of loading one
// adapter.
type LoRABenchReport struct {
	Adapters, Rank, Batch int
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
	fmt.Fprintf(w, "| batch | %d sequences, %d adapters of rank %d (all projections) |\n", r.Batch, r.Adapters, r.Rank)
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
	rep := LoRABenchReport{Adapters: opt.Adapters, Rank: opt.Rank, Batch: opt.Batch}
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
		cj, w, err := lora.Random(c, lora.Config{Rank: opt.Rank, Alpha: 2 * float64(opt.Rank), Targets: lora.Modules[:]}, 0.02, uint64(i+1))
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
