package kernels

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// as16 narrows v to format f (F16 or BF16) and returns the file bytes and
// the exactly widened float32 values.
func as16(f Format, v []float32) ([]byte, []float32) {
	bits := make([]uint16, len(v))
	wide := make([]float32, len(v))
	if f == F16 {
		F32ToF16(bits, v)
		F16ToF32(wide, bits)
	} else {
		F32ToBF16(bits, v)
		BF16ToF32(wide, bits)
	}
	raw := make([]byte, 2*len(v))
	for i, b := range bits {
		binary.LittleEndian.PutUint16(raw[2*i:], b)
	}
	return raw, wide
}

// TestMatMulTW16EqualsWidened: products with F16/BF16 weights equal the
// float32 products with the widened weights bit for bit, on both paths,
// for every thread count, shape, tail and the special values.
func TestMatMulTW16EqualsWidened(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	pools := []*Pool{NewPool(1, 0), NewPool(2, 0), NewPool(3, 0)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for trial := 0; trial < 200; trial++ {
		m, n, k := 1+r.IntN(9), 1+r.IntN(60), 1+r.IntN(70)
		if trial%10 == 0 {
			k, n = 1+r.IntN(1200), 1+r.IntN(200)
		}
		special := trial%3 == 0
		for _, f := range []Format{F16, BF16} {
			raw, wide := as16(f, randVec(r, n*k, special))
			w := New16(f, n, k, raw)
			a := randVec(r, m*k, special)
			want := make([]float32, m*n)
			MatMulT(want, a, wide, m, n, k)
			p := pools[trial%len(pools)]
			asm, pure := bothPaths(func() []float32 {
				c := make([]float32, m*n)
				p.MatMulTW(c, a, w, m)
				return c
			})
			what := fmt.Sprintf("%v m=%d n=%d k=%d threads=%d", f, m, n, k, p.Threads())
			sameSlices(t, what+" asm", asm, want)
			sameSlices(t, what+" Go", pure, want)
			row := make([]float32, k)
			w.Row(n-1, row)
			sameSlices(t, what+" Row", row, wide[(n-1)*k:])
		}
	}
}

// q8Ref is the Q8 product in float64 from the quantized bytes: the sum
// over blocks of (Σ qa·qw)·wd·ad, the value the kernel rounds.
func q8Ref(a, w []byte) float64 {
	var s float64
	for o := 0; o < len(a); o += Q8BlockBytes {
		var p int64
		for t := range Q8Block {
			p += int64(int8(a[o+t])) * int64(int8(w[o+t]))
		}
		s += float64(p) * float64(q8Scale(w[o:])*q8Scale(a[o:]))
	}
	return s
}

// TestQ8GroupLayout: a Q8 matrix's rows, however many (partial last
// group), read back as each row quantized on its own: Q8Data row after
// row, and Row as q·d.
func TestQ8GroupLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	for _, n := range []int{1, 7, 8, 9, 16, 23} {
		k := 96
		wf := randVec(r, n*k, false)
		w, err := NewF32(n, k, wf).QuantizeQ8()
		if err != nil {
			t.Fatal(err)
		}
		if groups := (n + q8GroupRows - 1) / q8GroupRows; len(w.q8) != groups*q8GroupRows*k/Q8Block*Q8BlockBytes {
			t.Fatalf("n=%d: %d bytes for %d groups", n, len(w.q8), groups)
		}
		rb := k / Q8Block * Q8BlockBytes
		rows, want := w.Q8Data(), make([]byte, rb)
		got := make([]float32, k)
		for i := range n {
			quantizeQ8Row(want, wf[i*k:(i+1)*k])
			if !bytes.Equal(rows[i*rb:(i+1)*rb], want) {
				t.Fatalf("n=%d row %d: Q8Data differs from the row quantized alone", n, i)
			}
			w.Row(i, got)
			for b := range k / Q8Block {
				d := q8Scale(want[b*Q8BlockBytes:])
				for e := range Q8Block {
					if v := float32(int8(want[b*Q8BlockBytes+e])) * d; got[b*Q8Block+e] != v {
						t.Fatalf("n=%d row %d element %d: Row %v, want %v", n, i, b*Q8Block+e, got[b*Q8Block+e], v)
					}
				}
			}
		}
	}
}

// TestQ8Paths: the assembly and Go Q8 kernels agree bit for bit, a row's
// result does not depend on the batch or thread count, the result is
// close to its float64 reference and to the float32 product.
func TestQ8Paths(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	p1, p3 := NewPool(1, 0), NewPool(3, 0)
	defer p1.Close()
	defer p3.Close()
	for trial := 0; trial < 60; trial++ {
		m, n, k := 1+r.IntN(9), 1+r.IntN(70), 32*(1+r.IntN(24))
		special := trial%4 == 0
		wf, a := randVec(r, n*k, special), randVec(r, m*k, special)
		w, err := NewF32(n, k, wf).QuantizeQ8()
		if err != nil {
			t.Fatal(err)
		}
		asm, pure := bothPaths(func() []float32 {
			c := make([]float32, m*n)
			p3.MatMulTW(c, a, w, m)
			return c
		})
		what := fmt.Sprintf("m=%d n=%d k=%d", m, n, k)
		sameSlices(t, what+" asm vs Go", asm, pure)
		for i := range m { // alone, one thread
			one := make([]float32, n)
			p1.MatMulTW(one, a[i*k:(i+1)*k], w, 1)
			sameSlices(t, fmt.Sprintf("%s row %d alone", what, i), one, asm[i*n:(i+1)*n])
		}
		if special {
			continue
		}
		rb := k / Q8Block * Q8BlockBytes
		qa, rows := make([]byte, rb), w.Q8Data()
		f32 := make([]float32, m*n)
		MatMulT(f32, a, wf, m, n, k)
		for i := range m {
			quantizeQ8Row(qa, a[i*k:(i+1)*k])
			for j := range n {
				ref := q8Ref(qa, rows[j*rb:(j+1)*rb])
				got := float64(asm[i*n+j])
				if d := math.Abs(got - ref); d > 1e-5*(math.Abs(ref)+1) {
					t.Fatalf("%s: C[%d][%d] = %v, float64 reference %v", what, i, j, got, ref)
				}
				// Quantization error: each side within half a step of
				// amax/127 per element; a loose relative bound.
				if d := math.Abs(got - float64(f32[i*n+j])); d > 0.05*math.Sqrt(float64(k)) {
					t.Fatalf("%s: C[%d][%d] = %v, float32 product %v", what, i, j, got, f32[i*n+j])
				}
			}
		}
	}
}

func TestQuantizeQ8(t *testing.T) {
	if _, err := NewF32(1, 33, make([]float32, 33)).QuantizeQ8(); err == nil {
		t.Fatal("33 columns quantized")
	}
	x := make([]float32, 64)
	for i := range 32 {
		x[i] = float32(i-16) / 4 // amax 4: d = 4/127
	}
	x[40] = float32(math.Inf(1))
	w, err := NewF32(1, 64, x).QuantizeQ8()
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, 64)
	w.Row(0, row)
	for i := range 32 {
		if d := math.Abs(float64(row[i] - x[i])); d > 4.0/127/2*1.0001 {
			t.Fatalf("x[%d] = %v dequantized to %v", i, x[i], row[i])
		}
	}
	if row[0] != -4 || row[48] == row[48] {
		t.Fatalf("row[0] = %v (want -4), row[48] = %v (want NaN)", row[0], row[48])
	}
	if got := w.Bytes(); got != 72 {
		t.Fatalf("Bytes = %d, want 72", got)
	}
}

// TestQuantizeQ8RowReference: quantizeQ8Row's bytes equal a float64
// statement of its rule (amax over |x|, d = amax/127, q =
// RoundToEven(x·(127/amax)) clamped to ±127) on random blocks, blocks
// of halfway cases, subnormals, huge values and non-finite values.
func TestQuantizeQ8RowReference(t *testing.T) {
	ref := func(dst []byte, x []float32) {
		var amax float32
		finite := true
		for _, v := range x {
			a := float32(math.Abs(float64(v)))
			finite = finite && a <= math.MaxFloat32
			amax = max(amax, a)
		}
		if !finite {
			clear(dst[:Q8Block])
			binary.LittleEndian.PutUint32(dst[Q8Block:], math.Float32bits(float32(math.NaN())))
			return
		}
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for i, v := range x {
			q := math.RoundToEven(float64(float32(v * id)))
			if q != q { // 0·Inf
				q = 0
			}
			dst[i] = byte(int8(max(-127, min(127, q))))
		}
		binary.LittleEndian.PutUint32(dst[Q8Block:], math.Float32bits(amax/127))
	}
	r := rand.New(rand.NewPCG(49, 50))
	got, want := make([]byte, Q8BlockBytes), make([]byte, Q8BlockBytes)
	x := make([]float32, Q8Block)
	for trial := range 20000 {
		for i := range x {
			switch trial % 5 {
			case 0:
				x[i] = float32(r.NormFloat64())
			case 1: // amax 127: every x·id near a half
				x[i] = float32(r.IntN(255)-127) + 0.5*float32(r.IntN(2))
			case 2: // id overflows for some of these
				x[i] = float32(r.NormFloat64()) * []float32{1e-40, 1e-37, 1e-36}[trial/5%3] * float32(r.IntN(2))
			case 3:
				x[i] = float32(r.NormFloat64()) * 3e38
			case 4:
				x[i] = []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1}[r.IntN(5)]
			}
		}
		if trial%5 == 1 {
			x[0] = 127
		}
		quantizeQ8Row(got, x)
		ref(want, x)
		if !bytes.Equal(got, want) {
			t.Fatalf("trial %d: %v\nquantized %v\nreference %v", trial, x, got, want)
		}
	}
}

// FuzzMatrix16 reads arbitrary bytes as an F16 or BF16 weight file and
// checks the kernels against the widened float32 product, and that
// quantizing them neither panics nor yields out-of-range values.
func FuzzMatrix16(f *testing.F) {
	f.Add([]byte{0, 0x3c, 0, 0xbc, 0xff, 0x7c, 1, 0}, uint8(3))
	f.Add(make([]byte, 130), uint8(32))
	f.Fuzz(func(t *testing.T, raw []byte, cols uint8) {
		k := int(cols%80) + 1
		n := len(raw) / 2 / k
		if n == 0 || n > 64 {
			return
		}
		a := make([]float32, 2*k)
		for i := range a {
			a[i] = float32(i%7) - 3
		}
		for _, fm := range []Format{F16, BF16} {
			w := New16(fm, n, k, raw)
			wide := make([]float32, n*k)
			for j := range n {
				w.Row(j, wide[j*k:(j+1)*k])
			}
			want := make([]float32, 2*n)
			MatMulT(want, a, wide, 2, n, k)
			p := NewPool(2, 0)
			asm, pure := bothPaths(func() []float32 {
				c := make([]float32, 2*n)
				p.MatMulTW(c, a, w, 2)
				return c
			})
			p.Close()
			sameSlices(t, "asm", asm, want)
			sameSlices(t, "Go", pure, want)
			if k%Q8Block == 0 {
				q, err := w.QuantizeQ8()
				if err != nil {
					t.Fatal(err)
				}
				rows := q.Q8Data()
				for o := 0; o < len(rows); o += Q8BlockBytes {
					for _, b := range rows[o : o+Q8Block] {
						if int8(b) == -128 {
							t.Fatalf("q = -128 in block at %d", o)
						}
					}
				}
			}
		}
	})
}

// TestGemm512MatchesAVX2: the AVX-512 kernels give the AVX2 kernels'
// results bit for bit (both are the canonical order).
func TestGemm512MatchesAVX2(t *testing.T) {
	if !use512 {
		t.Skip("no AVX-512 on this machine")
	}
	r := rand.New(rand.NewPCG(45, 46))
	for trial := 0; trial < 200; trial++ {
		m, n, k := 1+r.IntN(11), 1+r.IntN(40), 8*(1+r.IntN(40))
		if trial%10 == 0 {
			n, k = 1+r.IntN(300), 8*(1+r.IntN(150))
		}
		special := trial%3 == 0
		a, w := randVec(r, m*k, special), randVec(r, n*k, special)
		got := make([]float32, m*n)
		MatMulT(got, a, w, m, n, k)
		want := make([]float32, m*n)
		use512 = false
		MatMulT(want, a, w, m, n, k)
		use512 = true
		sameSlices(t, fmt.Sprintf("m=%d n=%d k=%d", m, n, k), got, want)
		withPureGo(func() { MatMulT(want, a, w, m, n, k) })
		sameSlices(t, fmt.Sprintf("Go m=%d n=%d k=%d", m, n, k), got, want)
		for _, f := range []Format{F16, BF16} {
			raw, wide := as16(f, w)
			MatMulT(want, a, wide, m, n, k)
			p := NewPool(1+trial%3, 0)
			p.MatMulTW(got, a, New16(f, n, k, raw), m)
			p.Close()
			sameSlices(t, fmt.Sprintf("%v m=%d n=%d k=%d", f, m, n, k), got, want)
		}
	}
}

// TestMatMulTWPaddedStride: where MatMulTW copies A to a padded row
// stride (k a multiple of 1024, 4 rows or more, AVX-512), every element
// still equals Dot of its A row and widened W row bit for bit, for each
// format and thread count, and MatMulTWShared's one copy serves every
// matrix of the same k, beside a Q8 matrix that reads A quantized (its
// product equals MatMulTW's alone).
func TestMatMulTWPaddedStride(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	for _, k := range []int{768, 1024, 2048} {
		for _, m := range []int{4, 9} {
			n := 21 + r.IntN(30)
			a := randVec(r, m*k, false)
			wf := randVec(r, n*k, false)
			ms := map[Format]*Matrix{F32: NewF32(n, k, wf)}
			wides := map[Format][]float32{F32: wf}
			for _, f := range []Format{F16, BF16} {
				raw, wide := as16(f, wf)
				ms[f], wides[f] = New16(f, n, k, raw), wide
			}
			q8, err := ms[F32].QuantizeQ8()
			if err != nil {
				t.Fatal(err)
			}
			q8Alone := make([]float32, m*n)
			p1 := NewPool(1, 0)
			p1.MatMulTW(q8Alone, a, q8, m)
			p1.Close()
			for threads := 1; threads <= 3; threads++ {
				p := NewPool(threads, 0)
				for _, f := range []Format{F32, F16, BF16} {
					c, c2, c3 := make([]float32, m*n), make([]float32, m*n), make([]float32, m*n)
					p.MatMulTWShared(a, m, [][]float32{c, c3, c2}, []*Matrix{ms[f], q8, ms[F32]})
					sameSlices(t, fmt.Sprintf("%v k=%d m=%d threads=%d: the Q8 product beside it", f, k, m, threads), c3, q8Alone)
					for i := range m {
						for j := range n {
							what := fmt.Sprintf("%v k=%d m=%d threads=%d C[%d][%d]", f, k, m, threads, i, j)
							if d := Dot(a[i*k:(i+1)*k], wides[f][j*k:(j+1)*k]); !same(c[i*n+j], d) {
								t.Fatalf("%s = %v, Dot = %v", what, c[i*n+j], d)
							}
							if d := Dot(a[i*k:(i+1)*k], wf[j*k:(j+1)*k]); !same(c2[i*n+j], d) {
								t.Fatalf("%s (second matrix) = %v, Dot = %v", what, c2[i*n+j], d)
							}
						}
					}
				}
				p.Close()
			}
		}
	}
}

// TestMatrixConvert: a BF16 matrix converted to F16 holds each weight
// rounded once from its exact value (what the F16 path loads from a file
// holding the same rounding), to F32 the exact values, and back to BF16
// the same bits; a weight beyond f16's range fails with ErrRange, naming
// its place; a matrix already in the format is returned as it is.
func TestMatrixConvert(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 5, 37
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(r.NormFloat64() * 0.05)
	}
	// Specials: zeros, an f16 subnormal, a value below f16's smallest
	// subnormal, the largest bfloat16 below f16's largest finite value
	// (65504 itself rounds to 65536 in bfloat16), infinities.
	copy(v, []float32{0, float32(math.Copysign(0, -1)), 3e-6, 1e-9, 65280, float32(math.Inf(1)), float32(math.Inf(-1))})
	raw, wide := as16(BF16, v)
	m := New16(BF16, rows, cols, raw)
	if c, err := m.Convert(BF16); c != m || err != nil {
		t.Fatalf("Convert to its own format = %p, %v; want the matrix itself", c, err)
	}
	f32, err := m.Convert(F32)
	if err != nil || f32.Format() != F32 {
		t.Fatalf("Convert(F32): %v", err)
	}
	_, want16 := as16(F16, wide)
	f16, err := m.Convert(F16)
	if err != nil || f16.Format() != F16 {
		t.Fatalf("Convert(F16): %v", err)
	}
	back, err := f32.Convert(BF16)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, cols)
	for i := range rows {
		for _, c := range []struct {
			m    *Matrix
			want []float32
		}{{f32, wide}, {f16, want16}, {back, wide}} {
			c.m.Row(i, row)
			for j, got := range row {
				if w := c.want[i*cols+j]; math.Float32bits(got) != math.Float32bits(w) {
					t.Fatalf("%v row %d col %d: %g, want %g", c.m.Format(), i, j, got, w)
				}
			}
		}
	}
	if want16[3] != 0 || want16[2] == 0 || want16[4] != 65280 {
		t.Fatalf("reference rounding: %v", want16[:5])
	}

	big := slices.Clone(v)
	big[2*cols+3] = 1e6
	raw, _ = as16(BF16, big)
	if _, err := New16(BF16, rows, cols, raw).Convert(F16); !errors.Is(err, ErrRange) || !strings.Contains(err.Error(), "row 2, column 3") {
		t.Fatalf("Convert of 1e6 to F16: %v, want ErrRange at row 2, column 3", err)
	}
	if _, err := m.Convert(Q8); err == nil {
		t.Fatal("Convert(Q8) succeeded; QuantizeQ8 makes Q8")
	}
}

// TestMatMulTMatrix: the single-threaded product of a weight matrix in
// every float format equals Dot with its widened rows, bit for bit, at an
// output stride wider than its rows.
func TestMatMulTMatrix(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	const m, n, k, ldc = 5, 13, 19, 17
	a := make([]float32, m*k)
	w32 := make([]float32, n*k)
	for i := range a {
		a[i] = r.Float32()*2 - 1
	}
	for i := range w32 {
		w32[i] = r.Float32()*2 - 1
	}
	for _, f := range []Format{F32, F16, BF16} {
		w, err := NewF32(n, k, w32).Convert(f)
		if err != nil {
			t.Fatal(err)
		}
		c := make([]float32, (m-1)*ldc+n)
		MatMulTMatrix(c, ldc, a, m, w)
		row := make([]float32, k)
		for j := range n {
			w.Row(j, row)
			for i := range m {
				if want := Dot(a[i*k:(i+1)*k], row); math.Float32bits(c[i*ldc+j]) != math.Float32bits(want) {
					t.Fatalf("%v: c[%d][%d] = %v, want %v", f, i, j, c[i*ldc+j], want)
				}
			}
		}
	}
}
