package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randBF16Tiny returns n bfloat16 values with exponents between 2^-76
// and 2^-52 (and a few subnormals): products of two of them lie around
// float32's smallest normal, 2^-126, so sums go through the flush to
// zero and the subnormal inputs through the read as zero.
func randBF16Tiny(r *rand.Rand, n int) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		e := uint16(127 - 52 - r.IntN(25))
		if r.IntN(16) == 0 {
			e = 0
		}
		out[i] = uint16(r.IntN(2))<<15 | e<<7 | uint16(r.IntN(128))
	}
	return out
}

// bf16Matrix builds a BF16Dot matrix from bfloat16 bits.
func bf16Matrix(t *testing.T, rows, cols int, bits []uint16) *Matrix {
	t.Helper()
	raw := make([]byte, 2*len(bits))
	for i, b := range bits {
		binary.LittleEndian.PutUint16(raw[2*i:], b)
	}
	m, err := New16(BF16, rows, cols, raw).BF16Dot()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBF16DotMatchesReference: products with a BF16Dot matrix equal the
// canonical order of dotBF16Go (A rounded with roundBF16Go) bit for bit,
// on the AVX512-BF16 kernels (where the CPU has them) and on the Go
// path, for every thread count, tile edge and batch size, with special
// values (NaN, ±Inf, subnormals, huge) and with tiny values whose sums
// are flushed to zero.
func TestBF16DotMatchesReference(t *testing.T) {
	if !useBF16Dot {
		t.Log("no AVX512-BF16 on this CPU: only the Go path runs")
	}
	r := rand.New(rand.NewPCG(61, 62))
	pools := []*Pool{NewPool(1, 0), NewPool(2, 0), NewPool(3, 0)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for trial := range 150 {
		m, n, k := 1+r.IntN(9), 1+r.IntN(40), BF16DotBlock*(1+r.IntN(8))
		if trial%10 == 0 {
			m, n, k = 1+r.IntN(20), 1+r.IntN(150), BF16DotBlock*(1+r.IntN(64))
		}
		var a []float32
		var wBits []uint16
		switch mode := trial % 3; mode {
		case 0, 1:
			a = randVec(r, m*k, mode == 1)
			wBits = make([]uint16, n*k)
			F32ToBF16(wBits, randVec(r, n*k, mode == 1))
		case 2:
			a = make([]float32, m*k)
			BF16ToF32(a, randBF16Tiny(r, m*k))
			wBits = randBF16Tiny(r, n*k)
		}
		w := bf16Matrix(t, n, k, wBits)
		aBits := make([]uint16, m*k)
		roundBF16Go(aBits, a)
		want := make([]float32, m*n)
		for i := range m {
			for j := range n {
				want[i*n+j] = dotBF16Go(aBits[i*k:(i+1)*k], wBits[j*k:(j+1)*k])
			}
		}
		p := pools[trial%len(pools)]
		asm, pure := bothPaths(func() []float32 {
			c := make([]float32, m*n)
			p.MatMulTW(c, a, w, m)
			return c
		})
		what := fmt.Sprintf("trial %d m=%d n=%d k=%d threads=%d", trial, m, n, k, p.Threads())
		sameSlices(t, what+" asm", asm, want)
		sameSlices(t, what+" Go", pure, want)
	}
}

// TestRoundBF16 checks the activations' rounding: F32ToBF16 (to nearest
// even, NaNs quieted, overflow to infinity) but subnormals to zeros of
// their sign, on the VCVTNE2PS2BF16 kernel (where the CPU has it) and the
// Go path, over every exponent, the ties and the special values.
func TestRoundBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(67, 68))
	src := make([]float32, 4096+7)
	for i := range src {
		b := r.Uint32()
		switch i % 8 {
		case 0:
			b = b&0xffff0000 | 0x8000 // a tie
		case 1:
			b &= 0x807fffff // subnormal (or zero)
		case 2:
			b |= 0x7f800000 // NaN or infinity
		case 3:
			b = b&0x80000000 | 0x7f7fffff // the largest finite: rounds to infinity
		}
		src[i] = math.Float32frombits(b)
	}
	want := make([]uint16, len(src))
	F32ToBF16(want, src)
	for i, f := range src {
		if b := math.Float32bits(f); b&0x7f800000 == 0 {
			want[i] = uint16(b>>16) & 0x8000
		}
	}
	asm, pure := bothPaths(func() []uint16 {
		got := make([]uint16, len(src))
		roundBF16(got, src)
		return got
	})
	for i := range src {
		if asm[i] != want[i] || pure[i] != want[i] {
			t.Fatalf("%#08x: asm %#04x, Go %#04x, want %#04x", math.Float32bits(src[i]), asm[i], pure[i], want[i])
		}
	}
}

// TestBF16DotCloseToExact checks the reference itself against an
// independent one: the float64 sum of the exact products of the rounded
// values, within the error the float32 accumulation allows.
func TestBF16DotCloseToExact(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 64))
	for range 200 {
		k := BF16DotBlock * (1 + r.IntN(64))
		a, w := make([]uint16, k), make([]uint16, k)
		F32ToBF16(a, randVec(r, k, false))
		F32ToBF16(w, randVec(r, k, false))
		var exact, mag float64
		for i := range k {
			p := float64(bf16Widen(a[i])) * float64(bf16Widen(w[i]))
			exact += p
			mag += math.Abs(p)
		}
		got := float64(dotBF16Go(a, w))
		// Each term passes through at most k/32+4 float32 roundings.
		if bound := float64(k/32+5) * 0x1p-24 * mag; math.Abs(got-exact) > bound {
			t.Fatalf("k=%d: %v, exact %v, off by more than %v", k, got, exact, bound)
		}
	}
}

// TestBF16DotOrder pins the canonical order on sums where it shows
// (2^25 + 1 rounds to 2^25, a tie to even; weights are 1): the odd
// column of a pair is added first, pair p goes to lane p mod 16, and
// lanes l and l+8 are added before the 8-lane tree.
func TestBF16DotOrder(t *testing.T) {
	const big = 0x1p25
	for _, c := range []struct {
		name string
		a    map[int]float32 // column → value; the rest are zero
		want float32
	}{
		// Lane 0: 2^25 (pair 0), then pair 16: odd 1 (lost), even -2^25.
		{"odd column first", map[int]float32{1: big, 33: 1, 32: -big}, 0},
		// Pair 16 shares lane 0 with pair 0 (the 1 is lost there); lane
		// 4 holds -2^25.
		{"pairs go round 16 lanes", map[int]float32{0: big, 32: 1, 8: -big}, 0},
		// Lane 8's 1 is added to lane 0's 2^25 (lost) before lane 4's
		// -2^25.
		{"lanes l and l+8 first", map[int]float32{0: big, 16: 1, 8: -big}, 0},
		// The control: the same values, all in lane 0's odd columns in
		// an order that keeps the 1.
		{"control", map[int]float32{1: big, 33: -big, 65: 1}, 1},
	} {
		a, w := make([]uint16, 96), make([]uint16, 96)
		for i, v := range c.a {
			a[i] = uint16(math.Float32bits(v) >> 16)
			w[i] = uint16(math.Float32bits(1) >> 16)
		}
		if got := dotBF16Go(a, w); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBF16DotShape: only a BF16 matrix whose columns are whole 32-column
// runs becomes BF16Dot; it shares the elements, reads back exactly and
// keeps its format name.
func TestBF16DotShape(t *testing.T) {
	raw, wide := as16(BF16, randVec(rand.New(rand.NewPCG(65, 66)), 3*64, false))
	m := New16(BF16, 3, 64, raw)
	d, err := m.BF16Dot()
	if err != nil {
		t.Fatal(err)
	}
	if d.Format() != BF16Dot || d.Format().String() != "bf16-dot" || d.Bytes() != m.Bytes() {
		t.Errorf("format %v, %d bytes; want bf16-dot, %d", d.Format(), d.Bytes(), m.Bytes())
	}
	if again, _ := d.BF16Dot(); again != d {
		t.Error("BF16Dot of a BF16Dot matrix is not the matrix itself")
	}
	row := make([]float32, 64)
	d.Row(2, row)
	sameSlices(t, "Row", row, wide[128:])
	func() {
		defer func() {
			if recover() == nil {
				t.Error("MatMulTMatrix of a BF16Dot matrix did not panic")
			}
		}()
		MatMulTMatrix(make([]float32, 3), 3, make([]float32, 64), 1, d)
	}()
	for _, bad := range []*Matrix{NewF32(3, 64, make([]float32, 3*64)), New16(F16, 3, 64, raw), New16(BF16, 4, 48, raw)} {
		if _, err := bad.BF16Dot(); !errors.Is(err, ErrBF16DotShape) {
			t.Errorf("%v %d×%d: %v, want ErrBF16DotShape", bad.Format(), bad.Rows(), bad.Cols(), err)
		}
	}
}
