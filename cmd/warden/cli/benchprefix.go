package cli

import (
	"context"
	"fmt"
	goruntime "runtime"

	"github.com/warden-ai/warden/worker/model"
	"github.com/warden-ai/warden/worker/runtime"
)

// runBenchPrefix measures the prefix cache: time to first token of the
// last turn of a multi-turn chat with and without a cache hit.
func runBenchPrefix(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench prefix", "bench prefix [--model-dir DIR] [--threads N] [--turns N] [--turn-tokens N] [--answer N]")
	dir := fs.String("model-dir", "", "model directory (default: the small preset, generated into the user cache on first use)")
	threads := fs.Int("threads", goruntime.NumCPU(), "compute threads")
	turns := fs.Int("turns", 8, "turns of the conversation")
	turnTokens := fs.Int("turn-tokens", 512, "new user tokens per turn")
	answer := fs.Int("answer", 16, "tokens generated per turn")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := cachedPreset(e, model.PresetSmall, model.F32)
		if err != nil {
			return err
		}
		*dir = d
	}
	cfg, err := model.LoadModelConfig(*dir)
	if err != nil {
		return err
	}
	headDim := cfg.HeadDim
	if headDim == 0 {
		headDim = cfg.HiddenSize / cfg.NumAttentionHeads
	}
	// Room for the conversation's cached pages plus the cold rerun of the
	// last turn (f32 K and V of every layer per token).
	tokens := *turns * (*turnTokens + *answer)
	perToken := int64(cfg.NumHiddenLayers) * 2 * int64(cfg.NumKeyValueHeads) * int64(headDim) * 4
	var rep runtime.PrefixBenchReport
	err = withRuntime(ctx, runtime.Options{
		ModelDir: *dir, Threads: *threads, PageTokens: 16,
		KVBytes:     perToken * int64(2*tokens+4*16),
		ChunkTokens: 512, MaxBatch: 1,
	}, func(rt *runtime.Runtime) (err error) {
		rep, err = rt.BenchPrefix(ctx, runtime.PrefixBenchOptions{Turns: *turns, TurnTokens: *turnTokens, AnswerTokens: *answer})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "warden bench prefix — model %s, %d threads\n\n", *dir, *threads)
	rep.WriteTable(e.stdout)
	return nil
}
