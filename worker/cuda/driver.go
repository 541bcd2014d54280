//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#cgo linux CFLAGS: -I/usr/local/cuda/include
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64 -L/usr/lib/x86_64-linux-gnu
#include <cuda.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

// ErrUnsupportedDevice reports a GPU the kernels cannot run on (compute
// capability below 8.0) or a missing device.
var ErrUnsupportedDevice = errors.New("cuda: unsupported or missing device")

// device is one GPU's primary context. Every driver call of the package
// runs inside device.do, on an OS thread with that context current.
type device struct {
	dev          cu.Device
	ctx          cu.CUContext
	major, minor int
	name         string
}

// openDevice retains the primary context of the GPU with the given ordinal
// (among those CUDA_VISIBLE_DEVICES exposes).
func openDevice(ordinal int) (*device, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: count devices: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("%w: device %d of %d", ErrUnsupportedDevice, ordinal, n)
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	name, err := dev.Name()
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	if major < 8 {
		return nil, fmt.Errorf("%w: %s has compute capability %d.%d, the kernels need 8.0 or later",
			ErrUnsupportedDevice, name, major, minor)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, fmt.Errorf("cuda: retain the primary context of %s: %w", name, err)
	}
	return &device{dev: dev, ctx: ctx, major: major, minor: minor, name: name}, nil
}

// do runs f on a locked OS thread with the device's context current.
// Driver calls are thread-safe, so several goroutines may be inside do at
// once (a forward step and page copies), each on its own thread.
func (d *device) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("cuda: make the context current: %w", err)
	}
	return f()
}

// release drops the package's reference to the primary context.
func (d *device) release() error {
	if err := d.dev.ReleasePrimaryCtx(); err != nil {
		return fmt.Errorf("cuda: release the primary context: %w", err)
	}
	return nil
}

// ptxArch is the PTX target the device loads: sm_90 for Hopper and later,
// sm_80 for Ampere and Ada.
func (d *device) ptxArch() string {
	if d.major >= 9 {
		return "sm_90"
	}
	return "sm_80"
}

// allocPinned allocates n bytes of page-locked host memory (cuMemAllocHost),
// which asynchronous copies need. Free it with freePinned. Call inside do.
func allocPinned(n int) ([]byte, error) {
	var p unsafe.Pointer
	if r := C.cuMemAllocHost(&p, C.size_t(n)); r != C.CUDA_SUCCESS {
		return nil, fmt.Errorf("cuda: cuMemAllocHost(%d bytes): %w", n, driverError(r))
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// freePinned frees memory from allocPinned. Call inside do.
func freePinned(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return cu.MemFreeHost(unsafe.Pointer(unsafe.SliceData(b)))
}

// driverError names a CUresult.
func driverError(r C.CUresult) error {
	var s *C.char
	if C.cuGetErrorName(r, &s) == C.CUDA_SUCCESS && s != nil {
		return fmt.Errorf("%s (%d)", C.GoString(s), int(r))
	}
	return fmt.Errorf("CUresult %d", int(r))
}

// dim3 is a launch grid or block shape.
type dim3 struct{ x, y, z int }

// launch runs fn on stream s. Every kernel parameter is one 64-bit word
// (kernels/common.cuh): device pointers, int64, float64 bits.
func launch(fn cu.Function, grid, block dim3, s cu.Stream, args ...uint64) error {
	params := make([]unsafe.Pointer, len(args))
	for i := range args {
		params[i] = unsafe.Pointer(&args[i])
	}
	return fn.Launch(grid.x, grid.y, grid.z, block.x, block.y, block.z, 0, s, params)
}

// ceilDiv returns ⌈a/b⌉ for positive b.
func ceilDiv(a, b int) int { return (a + b - 1) / b }
