package harness

import (
	"testing"

	"github.com/warden-ai/warden/config"
)

// WorkerSpec describes one worker of a cluster.
type WorkerSpec struct {
	// Role is prefill, decode or both.
	Role config.Role
	// Model is the served model name (default ModelTiny); it must be in
	// Options.Models.
	Model string
	// ModelDir is the model directory (default Env.Models[Model]), e.g. to
	// serve the tiny model under another name.
	ModelDir string
	// Transfer is the KV transfer backend (default tcp).
	Transfer config.TransferBackend
	// Edit, if set, changes the worker's config before it is written.
	Edit func(*config.Config)
}

// PD is a prefill and a decode worker of model over tcp.
func PD(model string) []WorkerSpec {
	return []WorkerSpec{{Role: config.RolePrefill, Model: model}, {Role: config.RoleDecode, Model: model}}
}

// PDOverTCPAndSHM is a cluster's models and workers for the same
// checkpoint (modelDir, the env's files of model) served twice over
// prefill/decode: as model over tcp and as shmModel over shm, both
// clamped to DefaultContext.
func PDOverTCPAndSHM(model, shmModel, modelDir string) ([]config.Model, []WorkerSpec) {
	models := []config.Model{
		{Name: model, ContextLength: DefaultContext, ContextPolicy: config.ContextClamp},
		{Name: shmModel, ContextLength: DefaultContext, ContextPolicy: config.ContextClamp},
	}
	workers := append(PD(model),
		WorkerSpec{Role: config.RolePrefill, Model: shmModel, ModelDir: modelDir, Transfer: config.TransferSHM},
		WorkerSpec{Role: config.RoleDecode, Model: shmModel, ModelDir: modelDir, Transfer: config.TransferSHM},
	)
	return models, workers
}

// Single is one worker of role both serving model.
func Single(model string) []WorkerSpec {
	return []WorkerSpec{{Role: config.RoleBoth, Model: model}}
}

// Worker is one worker process of a cluster.
type Worker struct {
	*Process
	// ID is its worker ID in the registry and the admin API.
	ID         string
	Role       config.Role
	Model      string
	Config     *config.Config
	ConfigPath string
	// MetricsURL serves the worker's Prometheus metrics.
	MetricsURL string
}

// Worker returns the first worker of role serving model, or nil.
func (c *Cluster) Worker(role config.Role, model string) *Worker {
	for _, w := range c.Workers {
		if w.Role == role && w.Model == model {
			return w
		}
	}
	return nil
}

func (c *Cluster) runningWorkers() []*Worker {
	var out []*Worker
	for _, w := range c.Workers {
		if w.Running() {
			out = append(out, w)
		}
	}
	return out
}

// RestartWorker starts w again (after Kill or Stop) with the same config
// and ports, and waits until the cluster is ready again.
func (c *Cluster) RestartWorker(t testing.TB, w *Worker) {
	t.Helper()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReady(t)
}
