//go:build amd64

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// withPacking runs fn with gemm packing W of every format from minRows
// rows of A up.
func withPacking(minRows int, fn func()) {
	saved := packMinRows
	defer func() { packMinRows = saved }()
	packMinRows = [3]int{minRows, minRows, minRows}
	fn()
}

// TestPackedPanels: the packed-panel kernels give the unpacked AVX-512
// kernels' results bit for bit, for every format and thread count, over
// shapes that leave 1 to 5 rows of A after the 6-row blocks, end a panel
// with a partial tile, cross several panels (the 3-tile panels of long
// rows too), and take k = 8 mod 16.
func TestPackedPanels(t *testing.T) {
	if !use512 {
		t.Skip("no AVX-512 on this machine")
	}
	r := rand.New(rand.NewPCG(61, 62))
	pools := []*Pool{NewPool(1, 0), NewPool(2, 0), NewPool(3, 0)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for trial := range 120 {
		m, n, k := 2+r.IntN(20), 1+r.IntN(60), 8*(1+r.IntN(40))
		if trial%8 == 0 {
			n, k = 1+r.IntN(300), 8*(1+r.IntN(300))
		}
		special := trial%3 == 0
		a := randVec(r, m*k, special)
		p := pools[trial%len(pools)]
		ms := benchMatrices(n, k, randVec(r, n*k, special))
		for _, f := range []Format{F32, F16, BF16} {
			w := ms[f]
			product := func(minRows int) []float32 {
				c := make([]float32, m*n)
				withPacking(minRows, func() { p.MatMulTW(c, a, w, m) })
				return c
			}
			sameSlices(t, fmt.Sprintf("%v m=%d n=%d k=%d threads=%d", f, m, n, k, p.Threads()), product(2), product(m+1))
		}
	}
}

// BenchmarkPackedPanels interleaves each format's product with and
// without packed panels: "x-unpacked" is the speed-up, from few rows of A
// (where packing must not cost) to a prefill's 512, and with the long
// rows of a down projection.
func BenchmarkPackedPanels(b *testing.B) {
	if !use512 {
		b.Skip("no AVX-512 on this machine")
	}
	for _, s := range [][3]int{{8, 2048, 768}, {16, 2048, 768}, {32, 2048, 768}, {64, 2048, 768}, {512, 2048, 768}, {128, 1024, 8192}} {
		m, n, k := s[0], s[1], s[2]
		r := rand.New(rand.NewPCG(10, 10))
		a := randVec(r, m*k, false)
		ms := benchMatrices(n, k, randVec(r, n*k, false))
		c := make([]float32, m*n)
		for _, f := range []Format{F32, F16, BF16} {
			b.Run(fmt.Sprintf("%v/m%d_%dx%d", f, m, n, k), func(b *testing.B) {
				p := NewPool(1, 0)
				defer p.Close()
				ts := alternate(b.N,
					func() { withPacking(m+1, func() { p.MatMulTW(c, a, ms[f], m) }) },
					func() { withPacking(2, func() { p.MatMulTW(c, a, ms[f], m) }) })
				b.ReportMetric(ts[0].Seconds()/ts[1].Seconds(), "x-unpacked")
				b.ReportMetric(2*float64(m*n*k)/ts[1].Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
