package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/worker/model"
)

// ensureDevModel writes the tiny preset into dir unless a model is there.
func ensureDevModel(dir string, log func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(dir, model.ConfigFile)); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dev model: %w", err)
	}
	log("generating the dev model (preset %s) in %s", model.PresetTiny, dir)
	start := time.Now()
	if err := model.Init(dir, model.PresetTiny, 1, model.F32); err != nil {
		return fmt.Errorf("dev model: %w", err)
	}
	var size int64
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				size += fi.Size()
			}
		}
	}
	log("generated the dev model (%s) in %v", formatSize(size), time.Since(start).Round(time.Millisecond))
	return nil
}

// servedModelOnly keeps in cfg.Models only the model `warden up`'s workers
// serve: a gateway is ready only once every model it advertises has its
// workers (I13), so another listed model (the defaults' tiny, with
// --model-dir) would keep it from ever being ready. A model the config
// file itself listed is reported when left out.
func servedModelOnly(cfg *config.Config, pinned bool, log func(string, ...any)) {
	var kept []config.Model
	var dropped []string
	for _, m := range cfg.Models {
		if m.Name == cfg.Worker.Model {
			kept = append(kept, m)
		} else {
			dropped = append(dropped, m.Name)
		}
	}
	cfg.Models = kept
	if pinned && len(dropped) > 0 {
		log("not serving %s: warden up runs workers of %s only", strings.Join(dropped, ", "), cfg.Worker.Model)
	}
}

// ensureModelListed adds the served model to cfg.Models when the config
// does not list it, with the context window of its config.json (the KV
// pools may clamp it, I2).
func ensureModelListed(cfg *config.Config, dir string) error {
	for _, m := range cfg.Models {
		if m.Name == cfg.Worker.Model {
			return nil
		}
	}
	mc, err := model.LoadModelConfig(dir)
	if err != nil {
		return fmt.Errorf("model directory %s: %w", dir, err)
	}
	cfg.Models = append(cfg.Models, config.Model{
		Name: cfg.Worker.Model, ContextLength: mc.ContextLength(), ContextPolicy: config.ContextClamp,
	})
	return nil
}

// ensureSecretFile returns path after creating it, when missing, with a
// random secret (0600).
func ensureSecretFile(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return path, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return path, writeSecret(path, hex.EncodeToString(b[:]))
}

// writeSecret writes s to path, readable by the owner only.
func writeSecret(path, s string) error {
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600) // an existing file keeps its mode otherwise
}

// writeConfigs writes every process's configuration file (0600: it may
// name secrets).
func (pl *upPlan) writeConfigs() error {
	for _, p := range append([]upProcess{pl.gateway}, pl.workers...) {
		if err := pl.writeConfig(p); err != nil {
			return err
		}
	}
	return nil
}

// writeConfig writes p's config file.
func (pl *upPlan) writeConfig(p upProcess) error {
	data, err := yaml.Marshal(p.cfg)
	if err != nil {
		return fmt.Errorf("%s config: %w", p.name, err)
	}
	header := "# Written by `warden up` for its " + p.name + "; rewritten at every start.\n"
	return os.WriteFile(pl.configPath(p), append([]byte(header), data...), 0o600)
}
