package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/model"
)

// kvDType is the element type of every KV page: both backends (cpu and
// cuda) store K and V as float32 in cpu.Spec's page layout.
const kvDType = "f32"

// layout is what a prefill and a decode worker of one model must agree on
// for the KV pages one writes and the other reads (invariant I11); the
// gateway compares it at registration (with page_tokens and the
// tokenizer's hash).
type layout struct {
	// kvDType is the element type of K and V.
	kvDType string
	// kvLayout names the page layout and its geometry:
	// [layer][k|v][slot][kv_heads*head_dim].
	kvLayout string
	// weightsSHA256 is the SHA-256 of config.json, the safetensors index
	// (if any) and every *.safetensors file, in name order.
	weightsSHA256 string
}

// modelLayout describes the KV layout of the model in dir as loaded with
// config c, and hashes its weights.
func modelLayout(m *model.Model) (layout, error) {
	s := cpu.SpecFor(&m.Config)
	l := layout{kvDType: kvDType,
		kvLayout: fmt.Sprintf("layer,kv,slot,kv_dim=%dx2xTx%d", s.Layers, s.KVDim())}
	var err error
	if m.GGUFPath != "" {
		l.weightsSHA256, err = hashFiles([]string{m.GGUFPath})
	} else {
		l.weightsSHA256, err = weightsHash(m.Dir)
	}
	if err != nil {
		return layout{}, fmt.Errorf("worker: hashing the model's weights: %w", err)
	}
	return l, nil
}

// weightsHash hashes config.json, model.safetensors.index.json (when
// present) and every *.safetensors file of dir, each preceded by its name
// and size, in name order.
func weightsHash(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	files = append([]string{filepath.Join(dir, model.ConfigFile)}, files...)
	if idx := filepath.Join(dir, model.WeightsIndexFile); fileExists(idx) {
		files = append(files, idx)
	}
	return hashFiles(files)
}

// hashFiles hashes each file, preceded by its name and size, in order.
func hashFiles(files []string) (string, error) {
	h := sha256.New()
	for _, path := range files {
		if err := hashFile(h, path); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(path), fi.Size())
	_, err = io.Copy(h, f)
	return err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
