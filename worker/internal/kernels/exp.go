package kernels

import "math"

// Constants of exp: ln2 split so that k*ln2Hi is exact for |k| < 2^11.
const (
	log2e = 1.4426950408889634
	ln2Hi = 6.93147180369123816490e-01 // upper bits of ln 2, 21 trailing zero bits
	ln2Lo = 1.90821492927058770002e-10 // ln 2 - ln2Hi
	// Beyond these, e^x overflows float64 or underflows to zero.
	expMax = 709.782712893384
	expMin = -745.1332191019412
)

// exp returns e^x in float64 using only +, -, *, / and exact scaling, each
// wrapped in an explicit conversion so that no compiler may fuse them: the
// result is the same on every platform, unlike math.Exp, whose amd64
// assembly differs from its pure-Go version. The error is a few ulps of
// float64, far below the float32 precision the callers round to.
func exp(x float64) float64 {
	switch {
	case x != x:
		return x
	case x > expMax:
		return math.Inf(1)
	case x < expMin:
		return 0
	}
	// x = k*ln2 + r with |r| <= ln2/2.
	k := math.Floor(float64(x*log2e) + 0.5)
	r := float64(x-float64(k*ln2Hi)) - float64(k*ln2Lo)
	// e^r by its Taylor series to degree 13 (the remainder is about 2^-58
	// relative at |r| = ln2/2), evaluated by Horner's rule.
	p := 1.0 / 6227020800 // 1/13!
	for _, c := range [...]float64{
		1.0 / 479001600, // 1/12!
		1.0 / 39916800,
		1.0 / 3628800,
		1.0 / 362880,
		1.0 / 40320,
		1.0 / 5040,
		1.0 / 720,
		1.0 / 120,
		1.0 / 24,
		1.0 / 6,
		1.0 / 2,
		1,
		1,
	} {
		p = float64(p*r) + c
	}
	return math.Ldexp(p, int(k))
}
