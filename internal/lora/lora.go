package lora

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/worker/model"
)

// ErrInvalid reports an adapter that cannot be served on its base model:
// malformed files, a layout PEFT does not write, or features warden does
// not compute.
var ErrInvalid = errors.New("invalid LoRA adapter")

// Limits on untrusted adapters.
const (
	// MaxConfigBytes bounds adapter_config.json.
	MaxConfigBytes = 1 << 20
	// MaxRank bounds r (PEFT adapters in use are at most a few hundred).
	MaxRank = 1024
)

// Module is a projection an adapter may target, by its PEFT name.
type Module string

// The projections of a Llama-family layer, in forward order.
const (
	Q    Module = "q_proj"
	K    Module = "k_proj"
	V    Module = "v_proj"
	O    Module = "o_proj"
	Gate Module = "gate_proj"
	Up   Module = "up_proj"
	Down Module = "down_proj"
)

// Modules lists every supported Module in forward order.
var Modules = [...]Module{Q, K, V, O, Gate, Up, Down}

// Shape returns the [out, in] shape of m's base weight in a model of
// configuration c.
func (m Module) Shape(c *model.Config) (out, in int, ok bool) {
	switch m {
	case Q:
		return c.QDim(), c.HiddenSize, true
	case K, V:
		return c.KVDim(), c.HiddenSize, true
	case O:
		return c.HiddenSize, c.QDim(), true
	case Gate, Up:
		return c.IntermediateSize, c.HiddenSize, true
	case Down:
		return c.HiddenSize, c.IntermediateSize, true
	}
	return 0, 0, false
}

// Config is what warden reads of adapter_config.json.
type Config struct {
	// BaseModel is base_model_name_or_path, as trained (informational:
	// the registry binds an adapter to a served model by name).
	BaseModel string
	// Rank is r, Alpha lora_alpha; Scale is what B·A is multiplied by
	// (Alpha/Rank, or Alpha/√Rank with use_rslora).
	Rank  int
	Alpha float64
	Scale float64
	// Targets are the projections named by target_modules.
	Targets []Module
}

// rawConfig is adapter_config.json; only the fields warden reads or must
// refuse are declared.
type rawConfig struct {
	PeftType      string          `json:"peft_type"`
	BaseModel     string          `json:"base_model_name_or_path"`
	R             *int            `json:"r"`
	Alpha         *float64        `json:"lora_alpha"`
	TargetModules json.RawMessage `json:"target_modules"`
	UseRSLoRA     bool            `json:"use_rslora"`
	UseDoRA       bool            `json:"use_dora"`
	FanInFanOut   bool            `json:"fan_in_fan_out"`
	Bias          string          `json:"bias"`
	ModulesToSave []string        `json:"modules_to_save"`
	RankPattern   map[string]any  `json:"rank_pattern"`
	AlphaPattern  map[string]any  `json:"alpha_pattern"`
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ParseConfig reads adapter_config.json.
func ParseConfig(b []byte) (Config, error) {
	if len(b) > MaxConfigBytes {
		return Config{}, invalidf("adapter_config.json is %d bytes, over the limit of %d", len(b), MaxConfigBytes)
	}
	var raw rawConfig
	if err := json.Unmarshal(b, &raw); err != nil {
		return Config{}, invalidf("adapter_config.json: %v", err)
	}
	switch {
	case raw.PeftType != "" && raw.PeftType != "LORA":
		return Config{}, invalidf("peft_type %q: only LORA adapters are served", raw.PeftType)
	case raw.R == nil || *raw.R < 1 || *raw.R > MaxRank:
		return Config{}, invalidf("r must be between 1 and %d", MaxRank)
	case raw.Alpha == nil || math.IsNaN(*raw.Alpha) || math.IsInf(*raw.Alpha, 0) || *raw.Alpha == 0:
		return Config{}, invalidf("lora_alpha must be a finite non-zero number")
	case raw.UseDoRA:
		return Config{}, invalidf("use_dora: DoRA adapters are not served")
	case raw.FanInFanOut:
		return Config{}, invalidf("fan_in_fan_out: only Llama-family linear layers (fan_in_fan_out false) are served")
	case raw.Bias != "" && raw.Bias != "none":
		return Config{}, invalidf("bias %q: adapters that train biases are not served", raw.Bias)
	case len(raw.ModulesToSave) > 0:
		return Config{}, invalidf("modules_to_save: adapters that replace whole modules are not served")
	case len(raw.RankPattern) > 0 || len(raw.AlphaPattern) > 0:
		return Config{}, invalidf("rank_pattern and alpha_pattern are not supported: one r and lora_alpha for every module")
	}
	targets, err := parseTargets(raw.TargetModules)
	if err != nil {
		return Config{}, err
	}
	c := Config{BaseModel: raw.BaseModel, Rank: *raw.R, Alpha: *raw.Alpha, Targets: targets}
	c.Scale = c.Alpha / float64(c.Rank)
	if raw.UseRSLoRA {
		c.Scale = c.Alpha / math.Sqrt(float64(c.Rank))
	}
	return c, nil
}

// parseTargets reads target_modules: a list of module names, or
// "all-linear".
func parseTargets(raw json.RawMessage) ([]Module, error) {
	var names []string
	var one string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, invalidf("target_modules is required")
	case json.Unmarshal(raw, &one) == nil:
		if one != "all-linear" {
			return nil, invalidf("target_modules %q: give a list of module names or \"all-linear\" (regular expressions are not supported)", one)
		}
		return slices.Clone(Modules[:]), nil
	case json.Unmarshal(raw, &names) != nil:
		return nil, invalidf("target_modules must be a list of strings")
	}
	var out []Module
	for _, n := range names {
		m := Module(n)
		if !slices.Contains(Modules[:], m) {
			return nil, invalidf("target module %q: supported are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", n)
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, invalidf("target_modules is empty")
	}
	slices.SortFunc(out, func(a, b Module) int { return slices.Index(Modules[:], a) - slices.Index(Modules[:], b) })
	return out, nil
}

// Pair is one projection's low-rank update of one layer: the base
// weight W ([out, in]) is served as W + Scale·B·A.
type Pair struct {
	// A is lora_A: Rank rows of in elements; B is lora_B: out rows of
	// Rank elements (row-major float32, converted from the file's dtype).
	A, B []float32
}

// Adapter is a parsed adapter, checked against its base model.
type Adapter struct {
	Config Config
	// Hash is the content hash (Hash of the two files).
	Hash string
	// Layers[i][m] is layer i's update of module m, nil where the
	// adapter leaves the projection as it is.
	Layers []map[Module]*Pair
	// Bytes is the memory the adapter's float32 matrices take.
	Bytes int64
}

// Parse reads an adapter's two files and checks them against base, the
// configuration of the model the adapter is served on.
func Parse(configJSON, weights []byte, base *model.Config) (*Adapter, error) {
	cfg, err := ParseConfig(configJSON)
	if err != nil {
		return nil, err
	}
	tensors, _, err := model.ParseSafetensors(weights)
	if err != nil {
		return nil, fmt.Errorf("%w: adapter_model.safetensors: %w", ErrInvalid, err)
	}
	a := &Adapter{Config: cfg, Hash: Hash(configJSON, weights), Layers: make([]map[Module]*Pair, base.NumHiddenLayers)}
	for _, t := range tensors {
		layer, m, isA, err := tensorName(t.Name)
		if err != nil {
			return nil, err
		}
		if layer >= base.NumHiddenLayers {
			return nil, invalidf("tensor %s: the base model has %d layers", t.Name, base.NumHiddenLayers)
		}
		if !slices.Contains(cfg.Targets, m) {
			return nil, invalidf("tensor %s: %s is not in target_modules", t.Name, m)
		}
		out, in, _ := m.Shape(base)
		want := []int{out, cfg.Rank}
		if isA {
			want = []int{cfg.Rank, in}
		}
		if !slices.Equal(t.Shape, want) {
			return nil, invalidf("tensor %s has shape %v, want %v (r %d on the base model's %s of [%d, %d])", t.Name, t.Shape, want, cfg.Rank, m, out, in)
		}
		f, err := t.Float32()
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %w", ErrInvalid, t.Name, err)
		}
		for _, x := range f {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, invalidf("tensor %s holds a NaN or infinity", t.Name)
			}
		}
		if a.Layers[layer] == nil {
			a.Layers[layer] = map[Module]*Pair{}
		}
		p := a.Layers[layer][m]
		if p == nil {
			p = &Pair{}
			a.Layers[layer][m] = p
		}
		dst := &p.B
		if isA {
			dst = &p.A
		}
		if *dst != nil {
			return nil, invalidf("tensor %s appears twice", t.Name)
		}
		*dst = slices.Clone(f)
		a.Bytes += int64(len(f)) * 4
	}
	pairs := 0
	for i, l := range a.Layers {
		for m, p := range l {
			if p.A == nil || p.B == nil {
				return nil, invalidf("layer %d %s has lora_A or lora_B without the other", i, m)
			}
			pairs++
		}
	}
	if pairs == 0 {
		return nil, invalidf("adapter_model.safetensors holds no LoRA weights")
	}
	return a, nil
}

// tensorName splits a PEFT tensor name,
// [base_model.model.]model.layers.{i}.{self_attn|mlp}.{module}.lora_{A|B}[.default].weight.
func tensorName(name string) (layer int, m Module, isA bool, err error) {
	bad := func() (int, Module, bool, error) {
		return 0, "", false, invalidf("tensor %q is not a LoRA weight of a supported projection (model.layers.N.{self_attn,mlp}.MODULE.lora_{A,B}.weight)", name)
	}
	s := strings.TrimPrefix(name, "base_model.model.")
	s, ok := strings.CutPrefix(s, "model.layers.")
	if !ok {
		return bad()
	}
	idx, rest, ok := strings.Cut(s, ".")
	if !ok {
		return bad()
	}
	layer, err = strconv.Atoi(idx)
	if err != nil || layer < 0 || strconv.Itoa(layer) != idx {
		return bad()
	}
	parts := strings.Split(strings.TrimSuffix(strings.Replace(rest, ".default.", ".", 1), ".weight"), ".")
	if len(parts) != 3 || !strings.HasSuffix(rest, ".weight") {
		return bad()
	}
	m = Module(parts[1])
	wantBlock := "self_attn"
	if m == Gate || m == Up || m == Down {
		wantBlock = "mlp"
	}
	if !slices.Contains(Modules[:], m) || parts[0] != wantBlock {
		return bad()
	}
	switch parts[2] {
	case "lora_A":
		return layer, m, true, nil
	case "lora_B":
		return layer, m, false, nil
	}
	return bad()
}

// hashLabel versions the content hash; a change of the format it covers
// changes the label.
const hashLabel = "warden-lora-v1\x00"

// Hash is an adapter's content hash, lowercase hex SHA-256 over a label,
// the length of adapter_config.json, its bytes and the safetensors bytes.
func Hash(configJSON, weights []byte) string {
	h := sha256.New()
	h.Write([]byte(hashLabel))
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(configJSON)))
	h.Write(n[:])
	h.Write(configJSON)
	h.Write(weights)
	return hex.EncodeToString(h.Sum(nil))
}

// ValidHash reports whether s has the form of a Hash (64 lowercase hex
// digits).
func ValidHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	b, err := hex.DecodeString(s)
	return err == nil && bytes.Equal([]byte(hex.EncodeToString(b)), []byte(s))
}
