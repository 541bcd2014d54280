package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/model"
)

// loadAssets reads the files the gateway needs to tokenize exactly as this
// model was trained: tokenizer.json (required) and, when present,
// tokenizer_config.json, generation_config.json and chat_template.jinja.
// Files above controlpb.MaxAssetFileBytes, or together above
// controlpb.MaxAssetsBytes, are refused here: no gateway would accept them.
// A GGUF model's tokenizer.json and tokenizer_config.json are the ones
// its metadata describes (model.GGUFTokenizerFiles).
func loadAssets(m *model.Model, modelName string) (*controlpb.ModelAssetsResponse, error) {
	dir := m.Dir
	read := func(name string, required bool) ([]byte, error) {
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) && !required {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("worker: model asset: %w", err)
		}
		if fi.Size() > controlpb.MaxAssetFileBytes {
			return nil, fmt.Errorf("worker: model asset %s is %d bytes, more than the %d allowed", path, fi.Size(), controlpb.MaxAssetFileBytes)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("worker: model asset: %w", err)
		}
		return b, nil
	}
	c := &m.Config
	a := &controlpb.ModelAssetsResponse{Model: modelName, Shape: &controlpb.ModelShape{
		NumHiddenLayers: int32(c.NumHiddenLayers), HiddenSize: int32(c.HiddenSize), IntermediateSize: int32(c.IntermediateSize),
		NumAttentionHeads: int32(c.NumAttentionHeads), NumKeyValueHeads: int32(c.NumKeyValueHeads), HeadDim: int32(c.HeadDim),
	}}
	tj, tc, isGGUF, err := m.TokenizerFiles()
	switch {
	case err != nil:
		return nil, fmt.Errorf("worker: model asset: %w", err)
	case isGGUF:
		for _, b := range [][]byte{tj, tc} {
			if len(b) > controlpb.MaxAssetFileBytes {
				return nil, fmt.Errorf("worker: the tokenizer in %s is %d bytes, more than the %d allowed", m.GGUFPath, len(b), controlpb.MaxAssetFileBytes)
			}
		}
		a.TokenizerJson, a.TokenizerConfigJson = tj, tc
	default:
		if a.TokenizerJson, err = read(tokenizer.TokenizerFile, true); err != nil {
			return nil, err
		}
		if a.TokenizerConfigJson, err = read(tokenizer.TokenizerConfigFile, false); err != nil {
			return nil, err
		}
		if a.GenerationConfigJson, err = read(model.GenerationConfigFile, false); err != nil {
			return nil, err
		}
		if a.ChatTemplateJinja, err = read(tokenizer.ChatTemplateFile, false); err != nil {
			return nil, err
		}
	}
	total := len(a.TokenizerJson) + len(a.TokenizerConfigJson) + len(a.GenerationConfigJson) + len(a.ChatTemplateJinja)
	if total > controlpb.MaxAssetsBytes {
		return nil, fmt.Errorf("worker: the model assets in %s are %d bytes together, more than the %d allowed", dir, total, controlpb.MaxAssetsBytes)
	}
	sum := sha256.Sum256(a.TokenizerJson)
	a.TokenizerSha256 = hex.EncodeToString(sum[:])
	return a, nil
}

// hostID identifies this machine for the gateway's same-host check (the
// shm transfer backend needs both workers on one host): the systemd
// machine ID, or the hostname where there is none.
func hostID(hostname string) string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id
		}
	}
	return hostname
}
