//go:build !(cgo && linux && (cuda || nvml))

package gpu

// openNVML: NVML needs cgo (go-nvml dlopens the driver's library) and one
// of the build tags cuda or nvml. The default build leaves go-nvml out: its
// C headers make every cold build print pages of deprecation warnings, for
// a collector that has nothing to read on a host without an NVIDIA GPU.
func openNVML() (reader, error) { return nil, errNoNVML }
