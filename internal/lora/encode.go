package lora

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/warden-ai/warden/worker/model"
)

// Encode writes an adapter's two files in the PEFT layout: cfg as
// adapter_config.json (BaseModel, Rank, Alpha, Targets; Scale is implied)
// and layers (Layers of an Adapter) as adapter_model.safetensors in
// float32, under PEFT's tensor names.
func Encode(cfg Config, layers []map[Module]*Pair) (configJSON, weights []byte, err error) {
	configJSON, err = json.MarshalIndent(map[string]any{
		"peft_type":               "LORA",
		"base_model_name_or_path": cfg.BaseModel,
		"r":                       cfg.Rank,
		"lora_alpha":              cfg.Alpha,
		"target_modules":          cfg.Targets,
		"bias":                    "none",
		"task_type":               "CAUSAL_LM",
	}, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	var ts []*model.Tensor
	for i, l := range layers {
		for m, p := range l {
			out, in := len(p.B)/cfg.Rank, len(p.A)/cfg.Rank
			name := fmt.Sprintf("base_model.model.model.layers.%d.%s.%s", i, block(m), m)
			ts = append(ts,
				&model.Tensor{Name: name + ".lora_A.weight", DType: model.F32, Shape: []int{cfg.Rank, in}, Data: f32Bytes(p.A)},
				&model.Tensor{Name: name + ".lora_B.weight", DType: model.F32, Shape: []int{out, cfg.Rank}, Data: f32Bytes(p.B)})
		}
	}
	var buf bytes.Buffer
	if err := model.EncodeSafetensors(&buf, ts, nil); err != nil {
		return nil, nil, err
	}
	return configJSON, buf.Bytes(), nil
}

func block(m Module) string {
	if m == Gate || m == Up || m == Down {
		return "mlp"
	}
	return "self_attn"
}

func f32Bytes(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, x := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Random draws an adapter of rank r for base on every layer's targets,
// with A and B uniform in ±amp (PEFT initialises B to zero; a trained one
// is not, and a zero B would make the adapter the base model): for tests,
// benchmarks and `warden model init-adapter`.
func Random(base *model.Config, cfg Config, amp float32, seed uint64) (configJSON, weights []byte, err error) {
	rng := rand.New(rand.NewPCG(seed, 0x10fa))
	draw := func(n int) []float32 {
		f := make([]float32, n)
		for i := range f {
			f[i] = (2*rng.Float32() - 1) * amp
		}
		return f
	}
	layers := make([]map[Module]*Pair, base.NumHiddenLayers)
	for i := range layers {
		layers[i] = map[Module]*Pair{}
		for _, m := range cfg.Targets {
			out, in, ok := m.Shape(base)
			if !ok {
				return nil, nil, invalidf("unknown module %q", m)
			}
			layers[i][m] = &Pair{A: draw(cfg.Rank * in), B: draw(out * cfg.Rank)}
		}
	}
	return Encode(cfg, layers)
}
