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

// expCoeffs are the Horner coefficients of exp's polynomial, highest
// degree first: the Taylor series of e^r to degree 10 (1/10! down to 1).
// The assembly's vector exponential uses the very same float64s.
var expCoeffs = [...]float64{
	1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
	1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1, 1,
}

// exp returns e^x in float64 from exactly specified operations, so that
// the result is the same on every platform, unlike math.Exp, whose amd64
// assembly differs from its pure-Go version: k = round-half-even(x·log2e),
// r = fma(-k, ln2Lo, fma(-k, ln2Hi, x)), the degree-10 polynomial of
// expCoeffs by fused multiply-adds (math.FMA rounds once on every
// platform, as VFMADD does), and an exact scaling by 2^k. The relative
// error is at most about 3e-13 (the series' remainder at r = -ln2/2), far
// below the float32 precision every caller rounds to.
func exp(x float64) float64 {
	switch {
	case x != x:
		return x
	case x > expMax:
		return math.Inf(1)
	case x < expMin:
		return 0
	}
	k := math.RoundToEven(float64(x * log2e))
	r := math.FMA(-k, ln2Lo, math.FMA(-k, ln2Hi, x))
	p := expCoeffs[0]
	for _, c := range expCoeffs[1:] {
		p = math.FMA(p, r, c)
	}
	return math.Ldexp(p, int(k))
}
