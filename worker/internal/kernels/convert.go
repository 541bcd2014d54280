package kernels

import (
	"fmt"
	"math"
	"math/bits"
)

func checkConvert(name string, dst, src int) {
	if dst != src {
		panic(fmt.Sprintf("kernels: %s of lengths %d and %d", name, dst, src))
	}
}

// BF16ToF32 widens bfloat16 values (raw bits) to float32; the conversion
// is exact. It panics if the lengths differ.
func BF16ToF32(dst []float32, src []uint16) {
	checkConvert("BF16ToF32", len(dst), len(src))
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// F32ToBF16 narrows float32 values to bfloat16 bits, rounding to nearest
// even; values beyond the bfloat16 range become ±Inf. NaNs stay NaN (the
// quiet bit is set and the top payload bits kept). It panics if the
// lengths differ.
func F32ToBF16(dst []uint16, src []float32) {
	checkConvert("F32ToBF16", len(dst), len(src))
	for i, f := range src {
		dst[i] = f32ToBF16(math.Float32bits(f))
	}
}

// f32ToBF16 is F32ToBF16 of the float32 with bits b.
func f32ToBF16(b uint32) uint16 {
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b >> 16 & 1)
	return uint16(b >> 16)
}

// F16ToF32 widens IEEE 754 binary16 values (raw bits) to float32, exactly:
// subnormals are normalised, ±Inf stay infinite, and NaNs stay NaN with
// their payload. It panics if the lengths differ.
func F16ToF32(dst []float32, src []uint16) {
	checkConvert("F16ToF32", len(dst), len(src))
	for i, h := range src {
		dst[i] = f16ToF32(h)
	}
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch {
	case e == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	case e != 0:
		return math.Float32frombits(sign | (e+112)<<23 | m<<13)
	case m == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal m·2^-24: shift the leading one to bit 10, the implicit bit.
	shift := uint32(bits.LeadingZeros32(m) - 21)
	m <<= shift
	e = 1 - shift
	return math.Float32frombits(sign | (e+112)<<23 | (m&0x3ff)<<13)
}

// F32ToF16 narrows float32 values to IEEE 754 binary16 bits, rounding to
// nearest even, with gradual underflow to half subnormals and overflow to
// ±Inf. NaNs stay NaN (the quiet bit is set and the top payload bits
// kept). It panics if the lengths differ.
func F32ToF16(dst []uint16, src []float32) {
	checkConvert("F32ToF16", len(dst), len(src))
	for i, f := range src {
		dst[i] = f32ToF16(f)
	}
}

func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e := int(b >> 23 & 0xff)
	m := b & 0x7fffff
	if e == 0xff {
		if m == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(m>>13)
	}
	he := e - 127 + 15 // half's biased exponent
	switch {
	case he >= 0x1f:
		return sign | 0x7c00
	case he <= 0:
		// Half subnormal: the value in units of 2^-24 is full·2^(e-126).
		shift := uint(126 - e)
		if e == 0 || shift > 24 {
			return sign // below half the smallest subnormal
		}
		full := m | 0x800000
		q := full >> shift
		rem := full & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && q&1 == 1 {
			q++
		}
		return sign | uint16(q) // q == 0x400 is the smallest normal, correctly
	}
	v := uint32(he)<<10 | m>>13
	rem := m & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && v&1 == 1 {
		v++ // a carry into the exponent is the right rounding, up to Inf
	}
	return sign | uint16(v)
}
