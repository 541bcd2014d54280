package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestBF16Conversion(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1 + 1.0/256, 0x3f80},        // half an ulp above 1: tie, to even (down)
		{1 + 3.0/256, 0x3f82},        // 1.5 ulp: tie, to even (up)
		{1 + 1.0/256 + 1e-7, 0x3f81}, // just above the tie
		{math.MaxFloat32, 0x7f80},    // rounds up to +Inf
		{float32(math.Inf(-1)), 0xff80},
	} {
		if got := f32ToBF16(tc.f); got != tc.h {
			t.Errorf("f32ToBF16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	if h := f32ToBF16(float32(math.NaN())); !math.IsNaN(float64(bf16ToF32(h))) {
		t.Errorf("NaN became %#04x", h)
	}
	// Every bfloat16 widens exactly and narrows back to itself.
	for h := range 1 << 16 {
		f := bf16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := f32ToBF16(f); back != uint16(h) {
			t.Fatalf("bf16 %#04x -> %g -> %#04x", h, f, back)
		}
	}
}

func TestF16Conversion(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{0.1, 0x2e66},
		{65504, 0x7bff},                 // largest finite
		{65519, 0x7bff},                 // below the tie with 65536
		{65520, 0x7c00},                 // tie between 65504 (odd) and 65536: rounds to Inf
		{1e9, 0x7c00},                   // overflow
		{0x1p-14, 0x0400},               // smallest normal
		{0x1p-24, 0x0001},               // smallest subnormal
		{0x1p-25, 0x0000},               // tie between 0 and 2^-24: to even (0)
		{0x1.8p-25, 0x0001},             // above the tie
		{0x3p-25, 0x0002},               // 1.5 × 2^-24: tie, to even (2)
		{0x1.ffcp-15, 0x0400},           // rounds up out of the subnormal range
		{-0x1p-30, 0x8000},              // underflow keeps the sign
		{float32(math.Inf(1)), 0x7c00},  //
		{float32(math.Inf(-1)), 0xfc00}, //
	} {
		if got := f32ToF16(tc.f); got != tc.h {
			t.Errorf("f32ToF16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	if h := f32ToF16(float32(math.NaN())); !math.IsNaN(float64(f16ToF32(h))) {
		t.Errorf("NaN became %#04x", h)
	}
	for h := range 1 << 16 {
		f := f16ToF32(uint16(h))
		if math.IsNaN(float64(f)) != (h&0x7c00 == 0x7c00 && h&0x3ff != 0) {
			t.Fatalf("f16 %#04x -> %g: NaN-ness changed", h, f)
		}
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := f32ToF16(f); back != uint16(h) {
			t.Fatalf("f16 %#04x -> %g -> %#04x", h, f, back)
		}
	}
	// Random values round to a nearest neighbour.
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		f := float32(math.Ldexp(r.Float64()*2-1, r.IntN(40)-28))
		h := f32ToF16(f)
		got := float64(f16ToF32(h))
		for _, n := range []uint16{h - 1, h + 1} {
			if n&0x7c00 == 0x7c00 {
				continue
			}
			if alt := float64(f16ToF32(n)); math.Abs(alt-float64(f)) < math.Abs(got-float64(f)) {
				t.Fatalf("f32ToF16(%g) = %g, but %g is nearer", f, got, alt)
			}
		}
	}
}

func TestDecodeEncodeFloats(t *testing.T) {
	vals := []float32{0, 1, -1.5, 0.333251953125, 1024, -0.0009765625}
	for _, d := range []DType{F32, F16, BF16} {
		buf := make([]byte, len(vals)*d.Size())
		encodeFloats(buf, vals, d)
		back := make([]float32, len(vals))
		decodeFloats(back, buf, d)
		for i := range vals {
			// All values are exact in every type except 0.33325… in bf16.
			if back[i] != vals[i] && !(d == BF16 && i == 3 && math.Abs(float64(back[i]-vals[i])) < 1e-3) {
				t.Errorf("%s: %g -> %g", d, vals[i], back[i])
			}
		}
	}
}

func TestParseDType(t *testing.T) {
	for in, want := range map[string]DType{"f32": F32, "FLOAT32": F32, "bf16": BF16, "bfloat16": BF16, "f16": F16, "float16": F16} {
		if got, err := ParseDType(in); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseDType("int8"); !errors.Is(err, ErrUnsupportedDType) {
		t.Errorf("int8: %v", err)
	}
}
