package worker

import (
	"os"
	"path/filepath"
	"time"

	"github.com/warden-ai/warden/worker/model"
)

// Step is one long start-up step of New: what it did, how many bytes it
// read or allocated, and how long it took.
type Step struct {
	// Name is "weights" (the model's weights loaded or mapped and its KV
	// pool allocated) or "assets" (the tokenizer files read and hashed).
	Name string
	// Bytes is the size of the weights files (with KVBytes for the pool
	// allocated beside them) or of the asset files.
	Bytes, KVBytes int64
	// Duration is how long the step took.
	Duration time.Duration
}

// WithProgress calls fn after each long start-up step of New, e.g. to
// show progress on a terminal. Every step is logged either way ("startup
// step", with step, bytes and duration).
func WithProgress(fn func(Step)) Option { return func(o *options) { o.progress = fn } }

// stepDone logs a finished start-up step and reports it to the progress
// callback, if any.
func (w *Worker) stepDone(fn func(Step), s Step) {
	attrs := []any{"step", s.Name, "bytes", s.Bytes, "duration", s.Duration}
	if s.KVBytes > 0 {
		attrs = append(attrs, "kv_bytes", s.KVBytes)
	}
	w.log.Info("startup step", attrs...)
	if fn != nil {
		fn(s)
	}
}

// weightsBytes is the size of the model's weights files (safetensors or GGUF).
func weightsBytes(m *model.Model) int64 {
	files, _ := filepath.Glob(filepath.Join(m.Dir, "*.safetensors"))
	if m.GGUFPath != "" {
		files = []string{m.GGUFPath}
	}
	var n int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// assetsBytes is the size of the model assets shipped to gateways.
func (w *Worker) assetsBytes() int64 {
	a := w.assets
	return int64(len(a.TokenizerJson) + len(a.TokenizerConfigJson) + len(a.GenerationConfigJson) + len(a.ChatTemplateJinja))
}
