//go:build cgo && linux && (cuda || nvml)

package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// TestOpenLibrary drives openLibrary with a mock NVML: a failed Init stops
// everything (no other call, which would hit unbound symbols), and a
// working library is read device by device.
func TestOpenLibrary(t *testing.T) {
	calls := 0
	failing := &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND },
		DeviceGetCountFunc: func() (int, nvml.Return) { calls++; return 0, nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { calls++; return nvml.SUCCESS },
	}
	if _, err := openLibrary(failing); err == nil || calls != 0 {
		t.Fatalf("failed Init: err %v, %d further calls", err, calls)
	}

	dev := &mock.Device{
		GetUUIDFunc:       func() (string, nvml.Return) { return "GPU-1234", nvml.SUCCESS },
		GetNameFunc:       func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 100, Free: 60, Used: 40}, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 42, Memory: 7}, nvml.SUCCESS
		},
	}
	shut := 0
	lib := &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { shut++; return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return 2, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i == 1 {
				return nil, nvml.ERROR_NO_PERMISSION
			}
			return dev, nvml.SUCCESS
		},
	}
	r, err := openLibrary(lib)
	if err != nil {
		t.Fatal(err)
	}
	got := r.read()
	want := reading{index: 0, uuid: "GPU-1234", name: "NVIDIA H200", total: 100, free: 60, used: 40, memOK: true, util: 0.42, utilOK: true}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("readings %+v, want [%+v]", got, want)
	}
	if err := r.close(); err != nil || shut != 1 {
		t.Errorf("close: %v, %d shutdowns", err, shut)
	}
}
