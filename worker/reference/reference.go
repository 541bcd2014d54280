// Package reference exposes the cpu backend's independent float64
// forward pass (worker/internal/cpu's Reference functions) on a model
// directory, for tests outside the worker tree that check what the
// workers compute end to end.
package reference

import (
	"fmt"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/model"
)

// Embedding is the float64 reference of an embedding of tokens by the
// model in dir under LoRA adapter a (nil: the base model; merged into the
// weights): the final hidden states after the model's final norm, pooled
// as p says and L2-normalised (cpu.ReferenceEmbedding).
func Embedding(dir string, a *lora.Adapter, tokens []int32, p engine.Pooling) ([]float64, error) {
	m, err := model.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	defer m.Close()
	w, err := cpu.WeightsOf(m)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	return cpu.ReferenceEmbedding(cpu.SpecFor(&m.Config), w, a, tokens, p), nil
}
