//go:build !linux

package kernels

import "unsafe"

// adviseHugePages does nothing where the kernel has no madvise hint for
// transparent huge pages.
func adviseHugePages(unsafe.Pointer, int) {}
