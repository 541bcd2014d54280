package kernels

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// withPureGo runs f with the assembly switched off.
func withPureGo(f func()) {
	saved := useAsm
	useAsm = false
	defer func() { useAsm = saved }()
	f()
}

// bothPaths returns f's results on the assembly path (if the CPU has it)
// and on the pure-Go path.
func bothPaths[T any](f func() T) (asm, pure T) {
	asm = f()
	withPureGo(func() { pure = f() })
	return asm, pure
}

// same reports whether a and b are the same float32, counting every NaN
// as the same (payloads are outside the contract).
func same(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

func sameSlices(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !same(got[i], want[i]) {
			t.Fatalf("%s: [%d] = %v (%#08x), want %v (%#08x)", what, i,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// randVec returns n values, mostly N(0,1); with special set it also
// contains zeros of both signs, subnormals, huge values, infinities and NaN.
func randVec(r *rand.Rand, n int, special bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
		if !special {
			continue
		}
		switch r.IntN(40) {
		case 0:
			v[i] = float32(math.Copysign(0, r.NormFloat64()))
		case 1:
			v[i] = math.Float32frombits(r.Uint32() & 0x807fffff) // subnormal
		case 2:
			v[i] *= 1e30
		case 3:
			v[i] = float32(math.Inf(1 - 2*r.IntN(2)))
		case 4:
			v[i] = float32(math.NaN())
		}
	}
	return v
}

// randFloat returns a float32 with random sign, mantissa and an exponent
// in a range wide enough to produce cancellation, subnormal results and
// overflow when combined.
func randFloat(r *rand.Rand) float32 {
	e := uint32(r.IntN(254) + 1)
	if r.IntN(2) == 0 {
		e = uint32(127 + r.IntN(40) - 20) // near 1: many midpoint-prone sums
	}
	return math.Float32frombits(r.Uint32()&0x807fffff | e<<23)
}

// fmaExact is x*y+z rounded once to float32, computed with math/big.
func fmaExact(x, y, z float32) float32 {
	if math.IsInf(float64(x), 0) || math.IsInf(float64(y), 0) || math.IsInf(float64(z), 0) ||
		x != x || y != y || z != z {
		return float32(float64(x)*float64(y) + float64(z))
	}
	p := new(big.Float).SetPrec(600).Mul(big.NewFloat(float64(x)).SetPrec(600), big.NewFloat(float64(y)))
	s := new(big.Float).SetPrec(600).Add(p, big.NewFloat(float64(z)))
	if s.Sign() == 0 {
		// The sign of an exact zero sum follows IEEE rules, which
		// big.Float does not model; float64 gets it right here.
		return float32(float64(x)*float64(y) + float64(z))
	}
	f, _ := s.Float32()
	return f
}

func TestFMA32DoubleRoundingCase(t *testing.T) {
	x := float32(1 + 1.0/4096) // x*x = 1 + 2^-11 + 2^-24, a float32 midpoint
	z := float32(math.Ldexp(1, -60))
	naive := float32(math.FMA(float64(x), float64(x), float64(z)))
	want := float32(1 + 1.0/2048 + 1.0/(1<<23)) // the exact value is above the midpoint
	if got := fma32(x, x, z); got != want {
		t.Fatalf("fma32 = %v, want %v", got, want)
	}
	if naive == want {
		t.Fatalf("float64 FMA unexpectedly rounded correctly; the case no longer shows double rounding")
	}
}

func TestFMA32MatchesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		x, y, z := randFloat(r), randFloat(r), randFloat(r)
		if i%3 == 0 {
			// Make z nearly cancel x*y, or sit far below it.
			z = float32(-float64(x) * float64(y) * (1 + math.Ldexp(r.Float64(), -r.IntN(40))))
		}
		if got, want := fma32(x, y, z), fmaExact(x, y, z); !same(got, want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", x, y, z, got, want)
		}
	}
}

// TestFMA32MatchesHardware compares fma32 with VFMADD231PS through Axpy's
// assembly, on many midpoint-prone and random inputs.
func TestFMA32MatchesHardware(t *testing.T) {
	if !useAsm {
		t.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(3, 4))
	const n = 1 << 14
	for round := 0; round < 20; round++ {
		alpha := randFloat(r)
		x := make([]float32, n)
		y := make([]float32, n)
		want := make([]float32, n)
		for i := range x {
			x[i], y[i] = randFloat(r), randFloat(r)
			if i%2 == 0 {
				y[i] = float32(math.Ldexp(float64(y[i]), -r.IntN(60)))
			}
			want[i] = fma32(alpha, x[i], y[i])
		}
		Axpy(alpha, x, y)
		sameSlices(t, "Axpy vs fma32", y, want)
	}
}

func TestDotPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	sizes := []int{}
	for k := 0; k <= 70; k++ {
		sizes = append(sizes, k)
	}
	sizes = append(sizes, 127, 128, 129, 1000, 4099)
	for _, k := range sizes {
		for _, special := range []bool{false, true} {
			a, b := randVec(r, k, special), randVec(r, k, special)
			asm, pure := bothPaths(func() float32 { return Dot(a, b) })
			if !same(asm, pure) {
				t.Fatalf("k=%d special=%v: asm %v, Go %v", k, special, asm, pure)
			}
			if want := canonicalDot(a, b); !same(pure, want) {
				t.Fatalf("k=%d special=%v: Go %v, canonical %v", k, special, pure, want)
			}
		}
	}
}

// canonicalDot is the contract's definition written as plainly as possible.
func canonicalDot(a, b []float32) float32 {
	var acc [8]float32
	for i := range a {
		acc[i%8] = fmaExact(a[i], b[i], acc[i%8])
	}
	return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

func TestMatMulTPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 300; trial++ {
		m, n, k := 1+r.IntN(11), 1+r.IntN(30), 1+r.IntN(70)
		if trial%10 == 0 {
			k = 1 + r.IntN(1200) // crosses panel boundaries for m > 1
			n = 1 + r.IntN(200)
		}
		special := trial%3 == 0
		a, w := randVec(r, m*k, special), randVec(r, n*k, special)
		asm, pure := bothPaths(func() []float32 {
			c := make([]float32, m*n)
			MatMulT(c, a, w, m, n, k)
			return c
		})
		what := fmt.Sprintf("m=%d n=%d k=%d", m, n, k)
		sameSlices(t, what+" asm vs Go", asm, pure)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				if d := Dot(a[i*k:(i+1)*k], w[j*k:(j+1)*k]); !same(asm[i*n+j], d) {
					t.Fatalf("%s: C[%d][%d] = %v, Dot = %v", what, i, j, asm[i*n+j], d)
				}
			}
		}
	}
}

// TestMatMulTLargePanel crosses the L2 panel and several panels with a
// shape like a real projection.
func TestMatMulTLargePanel(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k := 9, 301, 768
	a, w := randVec(r, m*k, false), randVec(r, n*k, false)
	c := make([]float32, m*n)
	MatMulT(c, a, w, m, n, k)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			if d := Dot(a[i*k:(i+1)*k], w[j*k:(j+1)*k]); !same(c[i*n+j], d) {
				t.Fatalf("C[%d][%d] = %v, Dot = %v", i, j, c[i*n+j], d)
			}
		}
	}
}

// TestMatMulTAccuracy bounds the error against a float64 reference: each
// lane adds about k/8 rounded terms and the tree 3 more, so
// |C - exact| <= (k/8 + 4)·2^-24·Σ|a·w| (first-order bound, padded by one).
func TestMatMulTAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	m, n, k := 5, 7, 1000
	a, w := randVec(r, m*k, false), randVec(r, n*k, false)
	c := make([]float32, m*n)
	MatMulT(c, a, w, m, n, k)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var ref, mag float64
			for l := 0; l < k; l++ {
				p := float64(a[i*k+l]) * float64(w[j*k+l])
				ref += p
				mag += math.Abs(p)
			}
			bound := (float64(k)/8 + 4) * math.Ldexp(1, -24) * mag
			if d := math.Abs(float64(c[i*n+j]) - ref); d > bound {
				t.Errorf("C[%d][%d] = %v, reference %v: error %g > bound %g", i, j, c[i*n+j], ref, d, bound)
			}
		}
	}
}

func TestMatMulTDegenerate(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	MatMulT(c, nil, nil, 2, 2, 0)
	sameSlices(t, "k=0", c, []float32{0, 0, 0, 0})
	MatMulT(nil, nil, nil, 0, 0, 5) // nothing to do
	defer func() {
		if recover() == nil {
			t.Fatal("short slices did not panic")
		}
	}()
	MatMulT(make([]float32, 4), make([]float32, 3), make([]float32, 4), 2, 2, 2)
}

func TestElementwisePaths(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for n := 0; n <= 70; n++ {
		for _, special := range []bool{false, true} {
			x, y, w := randVec(r, n, special), randVec(r, n, special), randVec(r, n, special)
			alpha := float32(r.NormFloat64())
			what := fmt.Sprintf("n=%d special=%v", n, special)

			asm, pure := bothPaths(func() []float32 {
				out := append([]float32(nil), y...)
				Axpy(alpha, x, out)
				return out
			})
			sameSlices(t, what+" Axpy", asm, pure)
			for i := range x {
				if want := fmaExact(alpha, x[i], y[i]); !same(pure[i], want) {
					t.Fatalf("%s Axpy[%d] = %v, want %v", what, i, pure[i], want)
				}
			}

			asm, pure = bothPaths(func() []float32 {
				out := append([]float32(nil), x...)
				Scale(out, alpha)
				return out
			})
			sameSlices(t, what+" Scale", asm, pure)

			asm, pure = bothPaths(func() []float32 {
				out := make([]float32, n)
				Add(out, x, y)
				return out
			})
			sameSlices(t, what+" Add", asm, pure)
			for i := range x {
				if !same(pure[i], x[i]+y[i]) {
					t.Fatalf("%s Add[%d]", what, i)
				}
			}

			asm, pure = bothPaths(func() []float32 {
				out := make([]float32, n)
				RMSNorm(out, x, w, 1e-5)
				return out
			})
			sameSlices(t, what+" RMSNorm", asm, pure)
		}
	}
}

func TestAddAliases(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	Add(x, x, x)
	sameSlices(t, "Add(x, x, x)", x, []float32{2, 4, 6, 8, 10, 12, 14, 16, 18})
}

func TestRMSNormValue(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5}
	w := []float32{1, 1, 2, 1, 0.5}
	out := make([]float32, len(x))
	RMSNorm(out, x, w, 1e-6)
	ss := float32(1 + 4 + 9 + 16 + 25)
	inv := 1 / float32(math.Sqrt(float64(ss/5+1e-6)))
	for i := range x {
		if want := x[i] * inv * w[i]; out[i] != want {
			t.Fatalf("out[%d] = %v, want %v", i, out[i], want)
		}
	}
	RMSNorm(x, x, w, 1e-6) // in place
	sameSlices(t, "in place", x, out)
}

func TestExp(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	check := func(x float64) {
		got, want := exp(x), math.Exp(x)
		if want == 0 || math.IsInf(want, 0) {
			if got != want {
				t.Fatalf("exp(%v) = %v, want %v", x, got, want)
			}
			return
		}
		if want < 0x1p-1022 { // subnormal range: absolute error
			if math.Abs(got-want) > 1e-320 {
				t.Fatalf("exp(%v) = %v, want %v", x, got, want)
			}
			return
		}
		// The degree-10 series' remainder relative to e^r, at r = -ln2/2:
		// (ln2/2)^11/11!/e^(-ln2/2) = 3.1e-13.
		if rel := math.Abs(got-want) / want; rel > 3.2e-13 {
			t.Fatalf("exp(%v) = %v, want %v (rel %g)", x, got, want, rel)
		}
	}
	// Above 709 math.Exp's amd64 assembly overflows early; float32
	// callers never get there (float32 overflows at 88.7).
	for i := 0; i < 100000; i++ {
		check(r.Float64()*(709+745) - 745)
		check((r.Float64()*2 - 1) * 20)
	}
	for _, x := range []float64{0, -0.0, 1, -1, 88.7, -103, 709.79, -745.2, -746, math.Inf(1), math.Inf(-1)} {
		check(x)
	}
	if !math.IsNaN(exp(math.NaN())) {
		t.Fatal("exp(NaN) is not NaN")
	}
}

func TestSiLUMul(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	gate, up := randVec(r, 1000, false), randVec(r, 1000, false)
	for i := range gate {
		gate[i] *= 10
	}
	got := append([]float32(nil), gate...)
	SiLUMul(got, up)
	for i := range gate {
		g := float64(gate[i])
		want := g / (1 + math.Exp(-g)) * float64(up[i])
		if d := math.Abs(float64(got[i]) - want); d > 1e-6*math.Abs(want)+1e-30 {
			t.Fatalf("SiLUMul[%d] = %v, want %v", i, got[i], want)
		}
	}
}

func TestSoftmax(t *testing.T) {
	x := []float32{1, 2, 3, float32(math.Inf(-1)), 3}
	Softmax(x)
	e := []float64{math.Exp(-2), math.Exp(-1), 1, 0, 1}
	sum := e[0] + e[1] + e[2] + e[3] + e[4]
	for i := range x {
		if d := math.Abs(float64(x[i]) - e[i]/sum); d > 1e-7 {
			t.Fatalf("x[%d] = %v, want %v", i, x[i], e[i]/sum)
		}
	}
	if x[3] != 0 || x[2] != x[4] {
		t.Fatalf("softmax = %v", x)
	}
	y := []float32{1, float32(math.NaN()), 2}
	Softmax(y)
	for i, v := range y {
		if v == v {
			t.Fatalf("softmax with NaN: y[%d] = %v", i, v)
		}
	}
	Softmax(nil)
}

func TestArgMax(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{nil, -1},
		{[]float32{3}, 0},
		{[]float32{1, 5, 5, 2}, 1},
		{[]float32{negZero, 0}, 0},
		{[]float32{1, nan, 9, nan}, 1},
		{[]float32{float32(math.Inf(-1)), -1}, 1},
	} {
		if got := ArgMax(c.x); got != c.want {
			t.Errorf("ArgMax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"Dot":     func() { Dot(make([]float32, 3), make([]float32, 4)) },
		"Axpy":    func() { Axpy(1, make([]float32, 3), make([]float32, 4)) },
		"Add":     func() { Add(make([]float32, 3), make([]float32, 3), make([]float32, 4)) },
		"RMSNorm": func() { RMSNorm(make([]float32, 3), make([]float32, 3), make([]float32, 2), 1) },
		"SiLUMul": func() { SiLUMul(make([]float32, 3), make([]float32, 2)) },
		"F16":     func() { F16ToF32(make([]float32, 3), make([]uint16, 2)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestNoAllocations(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	a, b := randVec(r, 100, false), randVec(r, 100, false)
	c := make([]float32, 100)
	for name, f := range map[string]func(){
		"Dot":     func() { Dot(a, b) },
		"MatMulT": func() { MatMulT(c[:6], a[:20], b[:30], 2, 3, 10) },
		"Axpy":    func() { Axpy(0.5, a, c) },
		"RMSNorm": func() { RMSNorm(c, a, b, 1e-5) },
		"SiLUMul": func() { SiLUMul(c, a) },
		"Softmax": func() { Softmax(c) },
	} {
		if n := testing.AllocsPerRun(20, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

func TestStridedPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for trial := 0; trial < 400; trial++ {
		width := r.IntN(140)
		count := 1 + r.IntN(20)
		stride := width + r.IntN(9)
		special := trial%4 == 0
		rows := randVec(r, (count-1)*stride+width, special)
		x := randVec(r, width, special)
		alpha := randVec(r, count, special)
		what := fmt.Sprintf("width=%d count=%d stride=%d", width, count, stride)

		asm, pure := bothPaths(func() []float32 {
			dst := make([]float32, count)
			DotStrided(dst, x, rows, stride)
			return dst
		})
		sameSlices(t, what+" DotStrided asm vs Go", asm, pure)
		for i := range asm {
			if d := Dot(x, rows[i*stride:i*stride+width]); !same(asm[i], d) {
				t.Fatalf("%s: DotStrided[%d] = %v, Dot = %v", what, i, asm[i], d)
			}
		}

		asm, pure = bothPaths(func() []float32 {
			y := append([]float32(nil), x...)
			AxpyStrided(y, alpha, rows, stride)
			return y
		})
		sameSlices(t, what+" AxpyStrided asm vs Go", asm, pure)
		want := append([]float32(nil), x...)
		for i, a := range alpha {
			Axpy(a, rows[i*stride:i*stride+width], want)
		}
		sameSlices(t, what+" AxpyStrided vs Axpy calls", asm, want)
	}
}

func TestStridedBoundsPanic(t *testing.T) {
	for name, f := range map[string]func(){
		"short":    func() { DotStrided(make([]float32, 3), make([]float32, 4), make([]float32, 11), 4) },
		"overflow": func() { DotStrided(make([]float32, 3), make([]float32, 4), make([]float32, 12), 1<<62) },
		"negative": func() { AxpyStrided(make([]float32, 4), make([]float32, 2), make([]float32, 12), -1) },
		"matmul":   func() { MatMulT(make([]float32, 4), make([]float32, 4), make([]float32, 4), 1<<32, 1<<32, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestStreamReadPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	buf := make([]byte, 256*37)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	asm, pure := bothPaths(func() uint64 { return streamRead(buf) })
	if asm != pure {
		t.Fatalf("streamRead: asm %#x, Go %#x", asm, pure)
	}
}

func TestProbes(t *testing.T) {
	if bw := MeasureCopyBandwidth(4<<20, 2); !(bw > 0) {
		t.Fatalf("bandwidth %v", bw)
	}
	if f := MeasureFMAPeak(1); !(f > 0) {
		t.Fatalf("FMA peak %v", f)
	}
	p := Peaks{ReadBandwidth: 10e9, FMAPeak: 100e9}
	if got := p.DecodeFraction(1e9, 5); got != 0.5 {
		t.Fatalf("DecodeFraction = %v", got)
	}
	if got := p.PrefillFraction(2e9, 10); got != 0.2 {
		t.Fatalf("PrefillFraction = %v", got)
	}
}

func TestSoftmaxSpecial(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, x := range [][]float32{{1, inf, 2}, {-inf, -inf}} {
		Softmax(x)
		for i, v := range x {
			if v == v {
				t.Fatalf("softmax: x[%d] = %v, want NaN", i, v)
			}
		}
	}
}
