package kernels

import (
	"testing"
	"unsafe"
)

// TestNewWeights: newWeights gives n zeroed elements and no more, and an
// allocation of a megabyte or more starts on a huge page boundary.
func TestNewWeights(t *testing.T) {
	check := func(name string, n, size int, first unsafe.Pointer, length, capacity int, zero bool) {
		t.Helper()
		if length != n || capacity != n || !zero {
			t.Fatalf("%s n=%d: len %d cap %d, all zero %v", name, n, length, capacity, zero)
		}
		if n*size >= hugePageBytes/2 && uintptr(first)%hugePageBytes != 0 {
			t.Fatalf("%s n=%d starts at %p, not on a huge page boundary", name, n, first)
		}
	}
	for _, n := range []int{1, 1000, 300_000, 1 << 20, 3<<20 + 7} {
		b := newWeights[byte](n)
		check("byte", n, 1, unsafe.Pointer(&b[0]), len(b), cap(b), allZero(b))
		u := newWeights[uint16](n)
		check("uint16", n, 2, unsafe.Pointer(&u[0]), len(u), cap(u), allZero(u))
		f := newWeights[float32](n)
		check("float32", n, 4, unsafe.Pointer(&f[0]), len(f), cap(f), allZero(f))
	}
	if len(newWeights[float32](0)) != 0 {
		t.Fatal("newWeights(0) is not empty")
	}
}

func allZero[T comparable](s []T) bool {
	var zero T
	for _, v := range s {
		if v != zero {
			return false
		}
	}
	return true
}
