package runtime

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/kvpool"
)

// BenchOptions configure BenchEngine.
type BenchOptions struct {
	// PromptTokens is the prefill benchmark's prompt length.
	PromptTokens int
	// DecodeTokens is how many tokens each decode sequence generates.
	DecodeTokens int
	// Batch is the larger decode batch (the smaller is 1).
	Batch int
	// BandwidthBytes is the buffer of the bandwidth probe.
	BandwidthBytes int
}

// BenchReport holds one run's measurements. Ratios compare figures
// measured in the same run on the same machine.
type BenchReport struct {
	Threads int
	Params  int64
	// WeightFormat is how the backend holds the projection weights (f32,
	// f16, bf16, q8).
	WeightFormat string
	// WeightBytesPerToken is what one decode step reads of the weights,
	// in the format they are held in.
	WeightBytesPerToken int64

	CopyBandwidth float64 // bytes/s read
	FMAPeak       float64 // FLOP/s

	PrefillTokensPerSec float64
	PrefillFLOPs        float64 // FLOP/s achieved
	PrefillOfPeak       float64 // PrefillFLOPs / FMAPeak

	Decode1TokensPerSec float64
	Decode1OfRoofline   float64 // roofline seconds per token / measured
	// GreedyIDs are the tokens the batch-1 decode generated (greedy) after
	// its prompt, the first BenchPromptIDs(16): what another engine
	// running the same weights must reproduce.
	GreedyIDs           []int32
	DecodeNTokensPerSec float64
	Batch               int
}

// BenchEngine measures prefill and decode throughput of the runtime's
// engine, and in the same run the machine's read bandwidth and FMA peak.
// Run must be running on r.
func (r *Runtime) BenchEngine(ctx context.Context, threads int, opt BenchOptions) (BenchReport, error) {
	c := &r.Model.Config
	rep := BenchReport{Threads: threads, Params: c.NumParameters(), Batch: opt.Batch}
	// Per decode step the matmuls read every layer weight and the LM head
	// once (the embedding row is negligible).
	layerParams := int64(c.NumHiddenLayers) * int64(
		c.QDim()*c.HiddenSize+2*c.KVDim()*c.HiddenSize+c.HiddenSize*c.QDim()+
			3*c.IntermediateSize*c.HiddenSize)
	lmHeadParams := int64(c.VocabSize) * int64(c.HiddenSize)
	matmulParams := layerParams + lmHeadParams
	if sb, ok := r.backend.(streamingBackend); ok {
		rep.WeightFormat, rep.WeightBytesPerToken = sb.WeightFormat(), sb.StreamedWeightBytes()
	} else {
		// The cuda backend computes on the file's element type.
		dt := r.Model.Weights().Layers[0].Q.DType
		rep.WeightFormat, rep.WeightBytesPerToken = strings.ToLower(string(dt)), matmulParams*int64(dt.Size())
	}

	rep.CopyBandwidth = kernels.MeasureCopyBandwidth(opt.BandwidthBytes, threads)
	rep.FMAPeak = kernels.MeasureFMAPeak(threads)

	prompt := BenchPromptIDs(opt.PromptTokens, c.VocabSize)
	// Prefill: one prompt, timed to its first token, after an untimed
	// one (as llama-bench warms up), so that the timed run does not pay
	// for first touches: the KV pages' and scratch buffers' page faults,
	// the compute threads' start.
	if _, _, err := r.generate(ctx, "prefill-warmup", prompt, 1, true, nil); err != nil {
		return rep, err
	}
	start := time.Now()
	if _, _, err := r.generate(ctx, "prefill", prompt, 1, true, nil); err != nil {
		return rep, err
	}
	el := time.Since(start).Seconds()
	rep.PrefillTokensPerSec = float64(len(prompt)) / el
	n := float64(len(prompt))
	attn := float64(c.NumHiddenLayers) * 2 * 2 * float64(c.QDim()) * n * (n + 1) / 2
	// Every position goes through the layers; only the last one's logits
	// are computed.
	rep.PrefillFLOPs = (2*float64(layerParams)*n + 2*float64(lmHeadParams) + attn) / el
	rep.PrefillOfPeak = rep.PrefillFLOPs / rep.FMAPeak

	short := prompt[:16]
	tps, ids, err := r.decodeRate(ctx, short, 1, opt.DecodeTokens, nil)
	if err != nil {
		return rep, err
	}
	rep.Decode1TokensPerSec, rep.GreedyIDs = tps, ids
	roofline := float64(rep.WeightBytesPerToken) / rep.CopyBandwidth
	rep.Decode1OfRoofline = roofline * tps
	if rep.DecodeNTokensPerSec, _, err = r.decodeRate(ctx, short, opt.Batch, opt.DecodeTokens, nil); err != nil {
		return rep, err
	}
	return rep, nil
}

// BenchPromptIDs is the benchmarks' prompt of n tokens: token i is
// (7919·i + 13) mod vocab.
func BenchPromptIDs(n, vocab int) []int32 {
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 13) % vocab)
	}
	return prompt
}

// streamingBackend reports the weights a decode step streams (the cpu
// backend).
type streamingBackend interface {
	WeightFormat() string
	StreamedWeightBytes() int64
}

var _ streamingBackend = (*cpu.Backend)(nil)

// decodeRate runs batch sequences of tokens each and returns generated
// tokens per second, excluding their prefill, and the tokens of one
// sequence (all sequences run the same greedy request). Sequence i runs
// under adapters[i%len(adapters)] (none: the base model).
func (r *Runtime) decodeRate(ctx context.Context, prompt []int32, batch, tokens int, adapters []engine.Adapter) (float64, []int32, error) {
	type result struct {
		d   time.Duration
		ids []int32
		err error
	}
	results := make(chan result, batch)
	for i := range batch {
		var ad engine.Adapter
		if len(adapters) > 0 {
			ad = adapters[i%len(adapters)]
		}
		go func() {
			d, ids, err := r.generate(ctx, fmt.Sprint("decode-", batch, "-", i), prompt, tokens, false, ad)
			results <- result{d, ids, err}
		}()
	}
	var longest time.Duration
	var ids []int32
	for range batch {
		res := <-results
		if res.err != nil {
			return 0, nil, res.err
		}
		longest, ids = max(longest, res.d), res.ids
	}
	return float64(batch*(tokens-1)) / longest.Seconds(), ids, nil
}

// generate runs one greedy sequence, under adapter ad (nil: the base
// model), and returns the time from its first token to its last (or to
// the first token, when fromSubmit) and the tokens it generated.
func (r *Runtime) generate(ctx context.Context, name string, prompt []int32, tokens int, fromSubmit bool, ad engine.Adapter) (time.Duration, []int32, error) {
	o := kvpool.Owner{Tenant: "bench", Request: name, Epoch: 1}
	if ad != nil {
		o.Adapter = ad.Hash()
	}
	pages, err := r.Pool.Reserve(o, len(prompt)+tokens)
	if err != nil {
		return 0, nil, err
	}
	defer r.Pool.Release(o)
	submitted := time.Now()
	st, err := r.Engine.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: prompt,
		Sampling: engine.Sampling{MaxTokens: tokens, IgnoreEOS: true}, Adapter: ad})
	if err != nil {
		return 0, nil, err
	}
	var first time.Time
	var ids []int32
	for {
		ev, err := st.Next(ctx)
		if err == io.EOF {
			return 0, nil, fmt.Errorf("runtime: bench stream ended early")
		}
		if err != nil {
			return 0, nil, err
		}
		switch ev.Kind {
		case engine.EventToken:
			if first.IsZero() {
				first = time.Now()
			}
			ids = append(ids, ev.Token)
		case engine.EventDone:
			if ev.Result.Err != nil {
				return 0, nil, ev.Result.Err
			}
			if fromSubmit {
				return first.Sub(submitted), ids, nil
			}
			return time.Since(first), ids, nil
		}
	}
}

// WriteTable prints the report as a Markdown table.
func (rep BenchReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| figure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| threads | %d |\n", rep.Threads)
	fmt.Fprintf(w, "| parameters | %.1f M |\n", float64(rep.Params)/1e6)
	fmt.Fprintf(w, "| weights in memory | %s |\n", rep.WeightFormat)
	fmt.Fprintf(w, "| weight bytes read per decode token | %.1f MB |\n", float64(rep.WeightBytesPerToken)/1e6)
	fmt.Fprintf(w, "| memory read bandwidth (measured) | %.2f GB/s |\n", rep.CopyBandwidth/1e9)
	fmt.Fprintf(w, "| FMA peak (measured) | %.1f GFLOP/s |\n", rep.FMAPeak/1e9)
	fmt.Fprintf(w, "| prefill | %.1f tokens/s, %.1f GFLOP/s = **%.0f%% of FMA peak** |\n",
		rep.PrefillTokensPerSec, rep.PrefillFLOPs/1e9, 100*rep.PrefillOfPeak)
	fmt.Fprintf(w, "| decode, batch 1 | %.2f tokens/s = **%.0f%% of bandwidth roofline** (%.2f tokens/s) |\n",
		rep.Decode1TokensPerSec, 100*rep.Decode1OfRoofline, rep.CopyBandwidth/float64(rep.WeightBytesPerToken))
	fmt.Fprintf(w, "| decode, batch %d | %.2f tokens/s (%.1fx batch 1) |\n",
		rep.Batch, rep.DecodeNTokensPerSec, rep.DecodeNTokensPerSec/rep.Decode1TokensPerSec)
	ids := make([]string, len(rep.GreedyIDs))
	for i, id := range rep.GreedyIDs {
		ids[i] = fmt.Sprint(id)
	}
	fmt.Fprintf(w, "| greedy ids, batch-1 decode | %s |\n", strings.Join(ids, " "))
}
