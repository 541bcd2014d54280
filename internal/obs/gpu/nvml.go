//go:build cgo && linux && (cuda || nvml)

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// library is the part of nvml.Interface the collector uses (a mock in
// tests).
type library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// device is the part of nvml.Device the collector uses.
type device interface {
	GetUUID() (string, nvml.Return)
	GetName() (string, nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetUtilizationRates() (nvml.Utilization, nvml.Return)
}

// nvmlReader reads devices through an initialised library.
type nvmlReader struct {
	lib     library
	devices []nvmlDevice
}

type nvmlDevice struct {
	index      int
	uuid, name string
	dev        device
}

// openNVML loads libnvidia-ml.so.1 (its own instance: no process-wide
// state) and lists the devices.
func openNVML() (reader, error) {
	return openLibrary(nvml.New())
}

// openLibrary initialises lib and finds its devices. The library binds
// its symbols lazily when Init loads it, so nothing else is called unless
// Init succeeded.
func openLibrary(lib library) (reader, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml init: %v", ret)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml device count: %v", ret)
	}
	if n == 0 {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml reports no GPU")
	}
	r := &nvmlReader{lib: lib}
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // a device NVML cannot open (lost, no permission)
		}
		d := nvmlDevice{index: i, dev: h}
		d.uuid, _ = h.GetUUID()
		d.name, _ = h.GetName()
		r.devices = append(r.devices, d)
	}
	if len(r.devices) == 0 {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml could open none of %d devices", n)
	}
	return r, nil
}

func (r *nvmlReader) read() []reading {
	out := make([]reading, 0, len(r.devices))
	for _, d := range r.devices {
		rd := reading{index: d.index, uuid: d.uuid, name: d.name}
		if m, ret := d.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			rd.total, rd.free, rd.used, rd.memOK = m.Total, m.Free, m.Used, true
		}
		if u, ret := d.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
			rd.util, rd.utilOK = float64(u.Gpu)/100, true
		}
		out = append(out, rd)
	}
	return out
}

func (r *nvmlReader) close() error {
	if ret := r.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %v", ret)
	}
	return nil
}
