// Package e2e holds warden's black-box end-to-end tests: the real binary,
// real processes, real sockets and real TLS, driven through test/harness.
package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/test/harness"
)

// env is the test binary's harness: the binary, the PKI and the models.
var env *harness.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = harness.Setup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	closeReferences()
	if err := env.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// Served model names of the main cluster besides harness.ModelTiny (P/D
// over tcp) and harness.ModelEndless (P/D over tcp): the tiny model again
// behind other worker shapes.
const (
	modelShm    = "tiny-shm"    // P/D over shm
	modelSingle = "tiny-single" // one worker of role both
)

// mainCluster is the cluster most tests share: one gateway in front of
// every shape of the tiny model and a P/D pair of the endless model.
func mainCluster(t *testing.T) *harness.Cluster {
	t.Helper()
	tiny := env.Models[harness.ModelTiny]
	models := harness.DefaultModels()
	for _, name := range []string{modelShm, modelSingle} {
		models = append(models, config.Model{Name: name, ContextLength: harness.DefaultContext, ContextPolicy: config.ContextClamp})
	}
	workers := append(harness.PD(harness.ModelTiny), harness.PD(harness.ModelEndless)...)
	workers = append(workers,
		harness.WorkerSpec{Role: config.RolePrefill, Model: modelShm, ModelDir: tiny, Transfer: config.TransferSHM},
		harness.WorkerSpec{Role: config.RoleDecode, Model: modelShm, ModelDir: tiny, Transfer: config.TransferSHM},
		harness.WorkerSpec{Role: config.RoleBoth, Model: modelSingle, ModelDir: tiny},
	)
	return harness.Start(t, env, harness.Options{Workers: workers, Models: models})
}

// references holds one Reference per model directory, opened on first
// use and closed by TestMain.
var references struct {
	sync.Mutex
	m map[string]*harness.Reference
}

// reference returns the reference engine of the model served as name.
func reference(t testing.TB, name string) *harness.Reference {
	t.Helper()
	dir := env.Models[harness.ModelTiny]
	if name == harness.ModelEndless {
		dir = env.Models[harness.ModelEndless]
	}
	return referenceAt(t, dir)
}

// referenceAt returns the reference engine of the model in dir.
func referenceAt(t testing.TB, dir string) *harness.Reference {
	t.Helper()
	references.Lock()
	defer references.Unlock()
	if r := references.m[dir]; r != nil {
		return r
	}
	r, err := harness.NewReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	if references.m == nil {
		references.m = map[string]*harness.Reference{}
	}
	references.m[dir] = r
	return r
}

func closeReferences() {
	references.Lock()
	defer references.Unlock()
	for _, r := range references.m {
		_ = r.Close()
	}
}
