package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"github.com/warden-ai/warden/worker/model"
	"github.com/warden-ai/warden/worker/runtime"
)

func runBench(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "engine" {
		fmt.Fprintln(e.stderr, "usage: warden bench engine [flags]")
		return errUsage
	}
	return runBenchEngine(ctx, e, args[1:])
}

func runBenchEngine(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench engine", "bench engine [--model-dir DIR] [--threads N] [--prompt N] [--decode N] [--batch N]")
	dir := fs.String("model-dir", "", "model directory (default: the small preset, generated into the user cache on first use)")
	threads := fs.Int("threads", goruntime.NumCPU(), "compute threads")
	promptTokens := fs.Int("prompt", 512, "prefill prompt length")
	decode := fs.Int("decode", 32, "tokens generated per decode sequence")
	batch := fs.Int("batch", 8, "larger decode batch")
	bw := fs.Int("bandwidth-bytes", 512<<20, "buffer size of the memory bandwidth probe")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := cachedPreset(e, model.PresetSmall)
		if err != nil {
			return err
		}
		*dir = d
	}
	rt, err := runtime.Open(runtime.Options{
		ModelDir: *dir, Threads: *threads, PageTokens: 16,
		KVBytes:     int64(*batch+1) * int64(*promptTokens+*decode+16) * 1 << 17,
		ChunkTokens: *promptTokens, MaxBatch: max(*batch, 1),
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() { stop(); <-done }()
	rep, err := rt.BenchEngine(ctx, *threads, runtime.BenchOptions{
		PromptTokens: *promptTokens, DecodeTokens: *decode, Batch: *batch, BandwidthBytes: *bw,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "warden bench engine — model %s\n\n", *dir)
	rep.WriteTable(e.stdout)
	return nil
}

// cachedPreset returns a directory holding the named preset with seed 1,
// generating it under the user cache directory on first use.
func cachedPreset(e *env, preset string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "warden", "models", preset+"-seed1")
	if _, err := os.Stat(filepath.Join(dir, model.ConfigFile)); err == nil {
		return dir, nil
	}
	fmt.Fprintf(e.stderr, "generating the %s model in %s (first use)…\n", preset, dir)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := model.Init(tmp, preset, 1, model.F32); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}
