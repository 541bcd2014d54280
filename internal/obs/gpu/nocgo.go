//go:build !(cgo && linux)

package gpu

// openNVML: NVML needs cgo (go-nvml dlopens the driver's library).
func openNVML() (reader, error) { return nil, errNoCgo }
