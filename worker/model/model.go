package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// GenerationConfig is the part of generation_config.json the worker uses.
type GenerationConfig struct {
	BOSTokenID  *int32   `json:"bos_token_id,omitempty"`
	EOSTokenIDs TokenIDs `json:"eos_token_id,omitempty"`
}

// LayerWeights are one decoder layer's tensors (matrices are [out, in]).
type LayerWeights struct {
	InputNorm         *Tensor // [hidden]
	Q                 *Tensor // [heads×head_dim, hidden]
	K                 *Tensor // [kv_heads×head_dim, hidden]
	V                 *Tensor // [kv_heads×head_dim, hidden]
	O                 *Tensor // [hidden, heads×head_dim]
	PostAttentionNorm *Tensor // [hidden]
	Gate              *Tensor // [intermediate, hidden]
	Up                *Tensor // [intermediate, hidden]
	Down              *Tensor // [hidden, intermediate]
	// QBias, KBias and VBias are the q/k/v projection biases ([heads×head_dim],
	// [kv_heads×head_dim] twice) of a family with QKVBias, else nil.
	QBias, KBias, VBias *Tensor
	// QNorm and KNorm are the per-head RMSNorm weights ([head_dim]) of a
	// family with QKNorm, else nil.
	QNorm, KNorm *Tensor
}

// Weights are all tensors the engine reads, checked against the config.
type Weights struct {
	Embed  *Tensor // [vocab, hidden]
	Layers []LayerWeights
	Norm   *Tensor // [hidden]
	// LMHead is [vocab, hidden]; it is the Embed tensor itself when the
	// config ties word embeddings.
	LMHead *Tensor
}

// Model is a loaded model directory. Its tensors alias read-only file
// mappings until Close. A Model is immutable after Load, so any number of
// goroutines may read it at once; Close must not race with readers.
type Model struct {
	Dir    string
	Config Config
	// Generation is generation_config.json, nil when the file is absent.
	Generation *GenerationConfig

	// GGUFPath is the GGUF file the model was loaded from, "" for a
	// safetensors directory (Dir is then the file's directory).
	GGUFPath string

	weights Weights
	tensors map[string]*Tensor
	files   []*File
	gguf    *GGUFFile
}

// Load reads config.json (and generation_config.json if present), maps the
// weights (model.safetensors, or the shards named by
// model.safetensors.index.json) and checks that every tensor the engine
// needs is present, has a float dtype and the shape the config implies.
// Tensors the engine does not use are kept but not checked beyond the
// file format. The tokenizer is not read here.
//
// dir may instead be a GGUF file (llama architecture), or a directory
// without config.json holding exactly one .gguf file: the config then
// comes from the GGUF metadata (see loadGGUF).
func Load(dir string) (*Model, error) {
	gp, err := ggufPath(dir)
	if err != nil {
		return nil, err
	}
	if gp != "" {
		return loadGGUF(gp)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	gen, err := loadGenerationConfig(dir, &cfg)
	if err != nil {
		return nil, err
	}
	m := &Model{Dir: dir, Config: cfg, Generation: gen}
	if err := m.openWeights(); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	if err := m.bindWeights(); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

func loadGenerationConfig(dir string, cfg *Config) (*GenerationConfig, error) {
	path := filepath.Join(dir, GenerationConfigFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("model: reading generation config: %w", err)
	}
	var g GenerationConfig
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("model: %s: %w: %w", path, ErrInvalidConfig, err)
	}
	ids := slices.Clone(g.EOSTokenIDs)
	if g.BOSTokenID != nil {
		ids = append(ids, *g.BOSTokenID)
	}
	for _, id := range ids {
		if err := cfg.checkTokenID("token id", id); err != nil {
			return nil, fmt.Errorf("model: %s: %w", path, err)
		}
	}
	return &g, nil
}

// EOSTokenIDs returns the ids that end generation: generation_config.json's
// when it names any, else config.json's.
func (m *Model) EOSTokenIDs() []int32 {
	if m.Generation != nil && len(m.Generation.EOSTokenIDs) > 0 {
		return slices.Clone(m.Generation.EOSTokenIDs)
	}
	return slices.Clone(m.Config.EOSTokenIDs)
}

// shardIndex is model.safetensors.index.json.
type shardIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// openWeights maps model.safetensors or, when absent, every shard in the
// index, and fills m.tensors. A single file wins over an index, as in
// transformers.
func (m *Model) openWeights() error {
	single := filepath.Join(m.Dir, WeightsFile)
	if _, err := os.Stat(single); err == nil {
		f, err := OpenSafetensors(single)
		if err != nil {
			return err
		}
		m.files = append(m.files, f)
		m.tensors = f.byName
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("model: %w", err)
	}

	indexPath := filepath.Join(m.Dir, WeightsIndexFile)
	data, err := os.ReadFile(indexPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("model: %s has neither %s nor %s: %w", m.Dir, WeightsFile, WeightsIndexFile, err)
	}
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	var idx shardIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return fmt.Errorf("model: %s: %w", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("model: %s has an empty weight_map", indexPath)
	}
	shards := map[string]*File{}
	for _, name := range slices.Sorted(maps.Values(idx.WeightMap)) {
		if _, ok := shards[name]; ok {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("model: %s names shard %q outside the model directory", indexPath, name)
		}
		f, err := OpenSafetensors(filepath.Join(m.Dir, name))
		if err != nil {
			return err
		}
		m.files = append(m.files, f)
		shards[name] = f
	}
	m.tensors = map[string]*Tensor{}
	owner := map[string]string{}
	for _, f := range m.files {
		for _, t := range f.tensors {
			if other, dup := owner[t.Name]; dup {
				return fmt.Errorf("model: tensor %s is in two shards, %s and %s", t.Name, other, f.Path)
			}
			m.tensors[t.Name], owner[t.Name] = t, f.Path
		}
	}
	for _, tensor := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		if shard := idx.WeightMap[tensor]; shards[shard].Tensor(tensor) == nil {
			return fmt.Errorf("model: %s maps tensor %s to %s, which does not contain it", indexPath, tensor, shard)
		}
	}
	return nil
}

// bindWeights checks every spec'd tensor and files it into m.weights.
func (m *Model) bindWeights() error {
	w := Weights{Layers: make([]LayerWeights, m.Config.NumHiddenLayers)}
	for _, s := range m.Config.TensorSpecs() {
		t, err := m.Tensor(s.Name)
		if err != nil {
			return err
		}
		if !t.DType.IsFloat() {
			return fmt.Errorf("model: tensor %s has dtype %s: %w", s.Name, t.DType, ErrUnsupportedDType)
		}
		if !slices.Equal(t.Shape, s.Shape) {
			return fmt.Errorf("model: %s has shape %v, want %v", s.Name, t.Shape, s.Shape)
		}
		var l *LayerWeights
		if s.role != roleEmbed && s.role != roleFinalNorm && s.role != roleLMHead {
			l = &w.Layers[s.layer]
		}
		switch s.role {
		case roleEmbed:
			w.Embed = t
		case roleInputNorm:
			l.InputNorm = t
		case roleQ:
			l.Q = t
		case roleK:
			l.K = t
		case roleV:
			l.V = t
		case roleO:
			l.O = t
		case rolePostAttentionNorm:
			l.PostAttentionNorm = t
		case roleGate:
			l.Gate = t
		case roleUp:
			l.Up = t
		case roleDown:
			l.Down = t
		case roleFinalNorm:
			w.Norm = t
		case roleLMHead:
			w.LMHead = t
		case roleQBias:
			l.QBias = t
		case roleKBias:
			l.KBias = t
		case roleVBias:
			l.VBias = t
		case roleQNorm:
			l.QNorm = t
		case roleKNorm:
			l.KNorm = t
		}
	}
	if m.Config.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	m.weights = w
	return nil
}

// Weights returns the tensors the engine reads. The struct is shared:
// treat it as read-only.
func (m *Model) Weights() *Weights { return &m.weights }

// Tensor returns the named tensor, or an error naming it and the directory.
func (m *Model) Tensor(name string) (*Tensor, error) {
	t, ok := m.tensors[name]
	if !ok {
		return nil, fmt.Errorf("model: tensor %s not found in %s", name, m.Dir)
	}
	return t, nil
}

// Float32 returns the named tensor's elements as float32: a read-only view
// of the mapping for aligned F32 tensors, a fresh conversion otherwise
// (see Tensor.Float32).
func (m *Model) Float32(name string) ([]float32, error) {
	t, err := m.Tensor(name)
	if err != nil {
		return nil, err
	}
	return t.Float32()
}

// Tensors returns every tensor in the model's files, sorted by name.
func (m *Model) Tensors() []*Tensor {
	ts := make([]*Tensor, 0, len(m.tensors))
	for _, t := range m.tensors {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })
	return ts
}

// Close unmaps every weights file. Tensors and float32 views obtained from
// the model must not be used afterwards. Closing twice is a no-op.
func (m *Model) Close() error {
	var errs []error
	for _, f := range m.files {
		errs = append(errs, f.Close())
	}
	if m.gguf != nil {
		errs = append(errs, m.gguf.Close())
	}
	m.files, m.gguf, m.tensors, m.weights = nil, nil, nil, Weights{}
	return errors.Join(errs...)
}
