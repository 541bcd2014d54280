package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// f16Ref decodes binary16 bits by the textbook formula.
func f16Ref(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	case 0:
		return sign * math.Ldexp(m, -24)
	}
	return sign * math.Ldexp(1+m/1024, e-15)
}

// roundRef rounds f to a binary format with mantBits fraction bits, least
// normal exponent minExp and largest finite value maxFinite, to nearest
// even, by scaling to an integer grid in float64.
func roundRef(f float32, mantBits, minExp int, maxFinite float64) float64 {
	v := math.Abs(float64(f))
	if v == 0 || math.IsInf(v, 0) {
		return float64(f)
	}
	_, e := math.Frexp(v) // v = frac·2^e, frac in [0.5, 1)
	ulpExp := max(e-1, minExp) - mantBits
	q := math.RoundToEven(math.Ldexp(v, -ulpExp))
	r := math.Ldexp(q, ulpExp)
	if r > maxFinite {
		r = math.Inf(1)
	}
	return math.Copysign(r, float64(f))
}

func TestF16ToF32Exhaustive(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	F16ToF32(dst, src)
	for i, got := range dst {
		want := f16Ref(uint16(i))
		if math.IsNaN(want) {
			if got == got {
				t.Fatalf("%#04x: got %v, want NaN", i, got)
			}
			// The payload is kept.
			if pb := math.Float32bits(got) >> 13 & 0x3ff; pb != uint32(i)&0x3ff {
				t.Fatalf("%#04x: NaN payload %#x", i, pb)
			}
			continue
		}
		if math.Float64bits(float64(got)) != math.Float64bits(want) {
			t.Fatalf("%#04x: got %v, want %v", i, got, want)
		}
	}
}

func TestF32ToF16(t *testing.T) {
	// Every half round-trips, NaNs stay NaN.
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := f16ToF32(h)
		got := f32ToF16(f)
		if f != f {
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
				t.Fatalf("NaN %#04x became %#04x", h, got)
			}
			continue
		}
		if got != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, got)
		}
	}
	// Midpoints between neighbouring halves and their float32 neighbours,
	// then random float32 bit patterns, against the grid-rounding reference.
	var in []float32
	for i := 0; i < 0x7c00; i++ {
		lo, hi := f16Ref(uint16(i)), f16Ref(uint16(i+1))
		mid := float32((lo + hi) / 2)
		in = append(in, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e9), -mid)
	}
	r := rand.New(rand.NewPCG(21, 22))
	for i := 0; i < 1<<20; i++ {
		in = append(in, math.Float32frombits(r.Uint32()))
	}
	out := make([]uint16, len(in))
	F32ToF16(out, in)
	for i, f := range in {
		if f != f {
			if out[i]&0x7c00 != 0x7c00 || out[i]&0x3ff == 0 {
				t.Fatalf("NaN %v became %#04x", f, out[i])
			}
			continue
		}
		want := roundRef(f, 10, -14, 65504)
		if got := f16Ref(out[i]); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("F32ToF16(%v) = %#04x (%v), want %v", f, out[i], got, want)
		}
	}
}

func TestBF16(t *testing.T) {
	// Exhaustive widening against the definition, and round trips.
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	wide := make([]float32, len(src))
	BF16ToF32(wide, src)
	back := make([]uint16, len(src))
	F32ToBF16(back, wide)
	for i, f := range wide {
		if math.Float32bits(f) != uint32(i)<<16 {
			t.Fatalf("%#04x widened to %#08x", i, math.Float32bits(f))
		}
		if f != f {
			if back[i]&0x7f80 != 0x7f80 || back[i]&0x7f == 0 {
				t.Fatalf("NaN %#04x became %#04x", i, back[i])
			}
			continue
		}
		if back[i] != uint16(i) {
			t.Fatalf("%#04x -> %#04x", i, back[i])
		}
	}
	// Rounding: midpoints and random values against the reference.
	maxBF16 := math.Ldexp(2-1.0/128, 127)
	r := rand.New(rand.NewPCG(23, 24))
	in := make([]float32, 0, 1<<20)
	for i := 0; i < 1<<19; i++ {
		b := r.Uint32()
		in = append(in, math.Float32frombits(b), math.Float32frombits(b&0xffff0000|0x8000))
	}
	out := make([]uint16, len(in))
	F32ToBF16(out, in)
	for i, f := range in {
		got := math.Float32frombits(uint32(out[i]) << 16)
		if f != f {
			if got == got {
				t.Fatalf("NaN %#08x became %v", math.Float32bits(f), got)
			}
			continue
		}
		want := roundRef(f, 7, -126, maxBF16)
		if math.Float64bits(float64(got)) != math.Float64bits(want) {
			t.Fatalf("F32ToBF16(%v) = %v, want %v", f, got, want)
		}
	}
}
