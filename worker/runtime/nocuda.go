//go:build !cuda

package runtime

import (
	"errors"

	"github.com/warden-ai/warden/worker/model"
)

// errNoCUDA is returned when the cuda backend is asked of a build without it.
var errNoCUDA = errors.New("runtime: this warden was built without CUDA support; rebuild with -tags cuda (see docs/cuda.md)")

func newCUDABackend(Options, *model.Model) (closingBackend, error) { return nil, errNoCUDA }

func cudaFreeMemory(*model.Model) (int64, error) { return 0, errNoCUDA }
