package kernels

import "unsafe"

// hugePageBytes is the size of a transparent huge page on x86-64 and of
// the common arm64 configuration.
const hugePageBytes = 2 << 20

// newWeights returns n zeroed elements for a weight matrix. Where the
// operating system has transparent huge pages, an allocation of a megabyte
// or more starts on a huge page boundary and is advised to use huge pages
// (its last partial huge page stays in small pages, so no memory is
// wasted on it): decode streams every weight once a token, and with 4 KiB
// pages a 400 MB model is 100,000 TLB entries a token, with 2 MiB pages
// 200. Batch-1 f32 decode of the small preset ran 20-30% faster with its
// weights copied this way than read from the mapped file
// (docs/BENCHMARKS.md). The alignment costs up to a huge page of address
// space, not of memory: the pages before the start are never touched.
func newWeights[T any](n int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if n*size < hugePageBytes/2 || hugePageBytes%size != 0 {
		return make([]T, n)
	}
	s := make([]T, n+hugePageBytes/size)
	off := (hugePageBytes - int(uintptr(unsafe.Pointer(&s[0]))%hugePageBytes)) % hugePageBytes / size
	s = s[off : off+n : off+n]
	adviseHugePages(unsafe.Pointer(&s[0]), n*size)
	return s
}
