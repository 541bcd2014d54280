package kernels

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHugePages asks the kernel to back the whole huge pages inside
// [p, p+size) with transparent huge pages: MADV_HUGEPAGE for the pages
// not yet touched, then MADV_COLLAPSE (Linux 6.1+) for those the Go heap
// had already used, which would otherwise stay 4 KiB until khugepaged
// collapses them, if ever. Both are hints: the memory and its contents
// stay as they are whatever the answer, so errors are ignored.
func adviseHugePages(p unsafe.Pointer, size int) {
	base := uintptr(p)
	start := (base + hugePageBytes - 1) &^ (hugePageBytes - 1)
	end := (base + uintptr(size)) &^ (hugePageBytes - 1)
	if end <= start {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, start-base)), end-start)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	_ = unix.Madvise(b, unix.MADV_COLLAPSE)
}
