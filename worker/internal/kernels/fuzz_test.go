package kernels

import (
	"math"
	"testing"
)

// FuzzFMA32 checks the fallback's float32 FMA against exact arithmetic.
func FuzzFMA32(f *testing.F) {
	one := math.Float32bits(1 + 1.0/4096)
	f.Add(one, one, math.Float32bits(float32(math.Ldexp(1, -60))))
	f.Add(uint32(0x00000001), uint32(0x3f800000), uint32(0x80000000))
	f.Add(uint32(0x7f7fffff), uint32(0x3f800001), uint32(0xff7fffff))
	f.Fuzz(func(t *testing.T, xb, yb, zb uint32) {
		x, y, z := math.Float32frombits(xb), math.Float32frombits(yb), math.Float32frombits(zb)
		if got, want := fma32(x, y, z), fmaExact(x, y, z); !same(got, want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", x, y, z, got, want)
		}
	})
}

// FuzzConvert checks the float32 → half/bfloat16 narrowing of arbitrary
// bits (as read from a model file) against the grid-rounding reference,
// and that widening the result back is consistent.
func FuzzConvert(f *testing.F) {
	for _, b := range []uint32{0, 0x80000000, 0x3f800000, 0x477ff000, 0x33000000, 0x7fc00001, 0x7f800000, 0x00000001} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b uint32) {
		x := math.Float32frombits(b)
		var h, bf [1]uint16
		F32ToF16(h[:], []float32{x})
		F32ToBF16(bf[:], []float32{x})
		var wh, wb [1]float32
		F16ToF32(wh[:], h[:])
		BF16ToF32(wb[:], bf[:])
		if x != x {
			if wh[0] == wh[0] || wb[0] == wb[0] {
				t.Fatalf("NaN %#08x became %v / %v", b, wh[0], wb[0])
			}
			return
		}
		if want := roundRef(x, 10, -14, 65504); math.Float64bits(float64(wh[0])) != math.Float64bits(want) {
			t.Fatalf("F32ToF16(%v) -> %v, want %v", x, wh[0], want)
		}
		if want := roundRef(x, 7, -126, math.Ldexp(2-1.0/128, 127)); math.Float64bits(float64(wb[0])) != math.Float64bits(want) {
			t.Fatalf("F32ToBF16(%v) -> %v, want %v", x, wb[0], want)
		}
	})
}
