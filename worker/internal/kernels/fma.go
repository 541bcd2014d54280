package kernels

import "math"

// fma32 returns x*y+z rounded once to float32, exactly like the hardware
// float32 fused multiply-add (VFMADD231PS).
//
// float32(math.FMA(float64(x), float64(y), float64(z))) is not enough: the
// product x*y is exact in float64 but the sum is rounded twice, first to 53
// bits and then to 24, and the first rounding can land exactly on a float32
// midpoint that the exact value was not on (for example x = y = 1+2^-12,
// z = 2^-60). So the fast path is taken only when the float64 result is not
// such a midpoint and lies in the float32 normal range, where every
// float32 rounding boundary is a float64; otherwise the exact error of the
// float64 sum is recovered with TwoSum and the sum is rounded to odd, after
// which the rounding to float32 is correct (53 >= 24+2 bits).
func fma32(x, y, z float32) float32 {
	// The float64 product is exact (24+24 bits < 53), so this is the
	// float64 FMA, fused by the compiler or not, without math.FMA's cost on
	// machines that lack the instruction.
	r := float64(x)*float64(y) + float64(z)
	b := math.Float64bits(r)
	exp := b >> 52 & 0x7ff
	const lowBits = 1<<29 - 1 // float64 fraction bits below float32 precision
	if exp == 0x7ff || (exp >= 1023-126 && b&lowBits != 1<<28) {
		return float32(r)
	}
	if r == 0 {
		return float32(r)
	}
	// Rare path: a float32 midpoint or a float32-subnormal result.
	// The explicit conversions forbid the compiler from fusing operations.
	p := float64(float64(x) * float64(y)) // exact: 24+24 bits < 53
	zz := float64(z)
	s := float64(p + zz) // == r
	bp := float64(s - zz)
	bz := float64(s - bp)
	e := float64(p-bp) + float64(zz-bz) // s + e == p + zz exactly
	if e == 0 {
		return float32(s)
	}
	sb := math.Float64bits(s)
	if sb&1 == 0 {
		// Round to odd: move to the odd neighbour on the side of the exact value.
		if (e > 0) == (s > 0) {
			sb++
		} else {
			sb--
		}
	}
	return float32(math.Float64frombits(sb))
}
