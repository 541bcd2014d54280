package kernels

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// smallPages returns n float32s in memory advised to stay in small pages.
func smallPages(n int) []float32 {
	s := make([]float32, n)
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*n), unix.MADV_NOHUGEPAGE)
	return s
}
