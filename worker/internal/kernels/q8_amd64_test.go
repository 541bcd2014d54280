//go:build amd64

package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randQ8Rows returns rows Q8 rows of blocks blocks: int8 values over the
// whole [-127, 127] range (with runs of ±127, the largest sums) and
// float32 scales, special ones (zero, subnormal, huge, infinite, NaN)
// when special is set.
func randQ8Rows(r *rand.Rand, rows, blocks int, special bool) []byte {
	out := make([]byte, rows*blocks*Q8BlockBytes)
	scales := randVec(r, rows*blocks, special)
	for b := range rows * blocks {
		blk := out[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		extreme := r.IntN(8) == 0
		for i := range Q8Block {
			v := r.IntN(255) - 127
			if extreme {
				v = 127 * (1 - 2*r.IntN(2))
			}
			blk[i] = byte(int8(v))
		}
		binary.LittleEndian.PutUint32(blk[Q8Block:], math.Float32bits(scales[b]*0.01))
	}
	return out
}

// TestQ8KernelSets: every q8 kernel set this CPU runs (AVX512-VNNI,
// AVX-VNNI, AVX2) gives the generic Go kernel's results bit for bit, for
// whole groups of rows and a partial last group, special scales
// included, and within rounding of the float64 reference.
func TestQ8KernelSets(t *testing.T) {
	sets := q8Available()
	if !useAsm {
		t.Skip("no AVX2 assembly on this machine")
	}
	defer func(saved *q8Kernels) { q8Active = saved }(q8Active)
	r := rand.New(rand.NewPCG(47, 48))
	for trial := range 120 {
		n, blocks := 1+r.IntN(13), 1+r.IntN(40)
		special := trial%4 == 0
		rb := blocks * Q8BlockBytes
		a, w := randQ8Rows(r, 1, blocks, special), randQ8Rows(r, n, blocks, special)
		m := newQ8(n, blocks*Q8Block)
		for j := range n {
			m.setQ8Row(j, w[j*rb:(j+1)*rb])
		}
		want := make([]float32, n)
		q8GroupsGo(want, a, m.q8)
		for _, s := range sets {
			q8Active = s
			got := make([]float32, n)
			q8Groups(got, a, m.q8)
			what := fmt.Sprintf("%s n=%d blocks=%d", s.name, n, blocks)
			sameSlices(t, what, got, want)
			if special {
				continue
			}
			for j := range n {
				ref := q8Ref(a, w[j*rb:(j+1)*rb])
				var mag float64 // the terms' magnitude bounds the rounding
				for o := 0; o < rb; o += Q8BlockBytes {
					mag += 127 * 127 * Q8Block * math.Abs(float64(q8Scale(a[o:])*q8Scale(w[j*rb+o:])))
				}
				if d := math.Abs(float64(got[j]) - ref); d > 1e-6*mag {
					t.Fatalf("%s row %d: %v, float64 reference %v", what, j, got[j], ref)
				}
			}
		}
	}
	t.Logf("q8 kernel sets compared: %d (active: %s)", len(sets), sets[0].name)
}

// BenchmarkQ8MatVec interleaves the batch-1 q8 product on each q8
// kernel set this CPU runs with the AVX2 one, one thread: "x-avx2" is
// the set's speed-up (same results), from the fastest runs.
func BenchmarkQ8MatVec(b *testing.B) {
	defer func(saved *q8Kernels) { q8Active = saved }(q8Active)
	for _, s := range [][2]int{{2048, 768}, {768, 2048}, {8192, 2048}} {
		n, k := s[0], s[1]
		r := rand.New(rand.NewPCG(11, 11))
		w, err := NewF32(n, k, randVec(r, n*k, false)).QuantizeQ8()
		if err != nil {
			b.Fatal(err)
		}
		a, c := randVec(r, k, false), make([]float32, n)
		for _, set := range q8Available() {
			b.Run(fmt.Sprintf("%dx%d/%s", n, k, set.name), func(b *testing.B) {
				p := NewPool(1, 0)
				defer p.Close()
				ts := alternate(b.N,
					func() { q8Active = &q8AVX2; p.MatMulTW(c, a, w, 1) },
					func() { q8Active = set; p.MatMulTW(c, a, w, 1) })
				tBase, tSet := ts[0], ts[1]
				b.ReportMetric(tBase.Seconds()/tSet.Seconds(), "x-avx2")
				b.ReportMetric(float64(len(w.q8))/tSet.Seconds()/1e9, "GB/s")
			})
		}
	}
}
