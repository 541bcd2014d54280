//go:build cuda

package runtime

import (
	"fmt"
	"testing"

	"github.com/warden-ai/warden/worker/model"
)

// These tests need an NVIDIA GPU; scripts/gpu-check.sh runs them.

// TestCUDARuntimeMatchesCPU opens the tiny model on both backends through
// Open — the cuda pool sized from the device's free memory after the
// weights — and checks that the engines generate the same greedy tokens;
// with worker.weights q8 on both, that they agree on at least the first
// q8Agree tokens (the cpu backend quantizes activations too, so a near tie
// may turn them apart later; worker/cuda's TestQ8MatchesCPU bounds the
// difference).
func TestCUDARuntimeMatchesCPU(t *testing.T) {
	const q8Agree = 8
	dir := t.TempDir()
	if err := model.Init(dir, model.PresetTiny, 1, model.BF16); err != nil {
		t.Fatal(err)
	}
	for _, q8 := range []bool{false, true} {
		t.Run(fmt.Sprint("q8=", q8), func(t *testing.T) {
			base := Options{ModelDir: dir, Threads: 2, PageTokens: 16, ChunkTokens: 32, MaxBatch: 4, Quantize: q8}
			cpuOpt := base
			cpuOpt.Backend, cpuOpt.KVBytes = "cpu", 64<<20
			cudaOpt := base
			cudaOpt.Backend, cudaOpt.KVFraction = "cuda", 0.01
			cpuRT, cudaRT := start(t, cpuOpt), start(t, cudaOpt)
			if cudaRT.Capacity.Pages == 0 || cudaRT.Capacity.PageBytes != cpuRT.Capacity.PageBytes {
				t.Fatalf("cuda pool %v, cpu pool %v", cudaRT.Capacity, cpuRT.Capacity)
			}
			t.Logf("cuda %s", cudaRT.Capacity)
			vocab := cpuRT.Model.Config.VocabSize
			for i, n := range []int{5, 70} {
				prompt := make([]int32, n)
				for j := range prompt {
					prompt[j] = int32((j*131 + i*17 + 1) % vocab)
				}
				name := fmt.Sprint("prompt-", i)
				want := greedy(t, cpuRT, name, prompt, 20)
				got := greedy(t, cudaRT, name, prompt, 20)
				if !q8 && fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("prompt %d: cuda generated %v, cpu %v", i, got, want)
				}
				if q8 && fmt.Sprint(got[:q8Agree]) != fmt.Sprint(want[:q8Agree]) {
					t.Fatalf("prompt %d: q8 cuda generated %v, q8 cpu %v", i, got, want)
				}
			}
		})
	}
}
