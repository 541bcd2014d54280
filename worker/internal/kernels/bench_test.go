package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
)

// The benchmarks report kernel speed next to the machine's limits measured
// in the same run, so the ratios can be read off directly:
//
//	go test -run '^$' -bench 'CopyBandwidth|FMAPeak' -benchtime 1x ./worker/internal/kernels/
//	go test -run '^$' -bench 'Ratio' -benchtime 40x ./worker/internal/kernels/
//	go test -run '^$' -bench 'Dot|MatVec|MatMulT|Attention' -benchtime 0.2s ./worker/internal/kernels/
//
// MatVec reports GB/s of weight bytes (compare BenchmarkCopyBandwidth),
// MatMulT reports GFLOP/s (compare BenchmarkFMAPeak). The Ratio
// benchmarks interleave a kernel with its limit and report the percentage
// directly, which is the figure to trust on a shared machine. Names end in
// /tN for the thread count.

var benchThreads = []int{1, 2}

func BenchmarkCopyBandwidth(b *testing.B) {
	for _, threads := range benchThreads {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			var bw float64
			for i := 0; i < b.N; i++ {
				bw = MeasureCopyBandwidth(256<<20, threads)
			}
			b.ReportMetric(bw/1e9, "GB/s")
		})
	}
}

func BenchmarkFMAPeak(b *testing.B) {
	for _, threads := range benchThreads {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			var f float64
			for i := 0; i < b.N; i++ {
				f = MeasureFMAPeak(threads)
			}
			b.ReportMetric(f/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkDot(b *testing.B) {
	for _, k := range []int{64, 128, 768, 4096} {
		b.Run(fmt.Sprintf("k%d", k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			x, y := randVec(r, k, false), randVec(r, k, false)
			b.SetBytes(int64(8 * k))
			for i := 0; i < b.N; i++ {
				Dot(x, y)
			}
		})
	}
}

// BenchmarkMatVec is batch-1 decode: one activation row against a weight
// matrix of n rows × k columns.
func BenchmarkMatVec(b *testing.B) {
	for _, s := range [][2]int{{768, 2048}, {2048, 768}, {32000, 768}, {4096, 4096}} {
		n, k := s[0], s[1]
		r := rand.New(rand.NewPCG(2, 2))
		a, w := randVec(r, k, false), randVec(r, n*k, false)
		c := make([]float32, n)
		for _, threads := range benchThreads {
			b.Run(fmt.Sprintf("%dx%d/t%d", n, k, threads), func(b *testing.B) {
				p := NewPool(threads, 0)
				defer p.Close()
				b.SetBytes(int64(4 * n * k))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.MatMulT(c, a, w, 1, n, k)
				}
			})
		}
	}
}

// BenchmarkMatMulT is prefill: m activation rows against an n×k weight.
func BenchmarkMatMulT(b *testing.B) {
	for _, s := range [][3]int{{64, 2048, 768}, {256, 2048, 768}, {256, 768, 2048}} {
		m, n, k := s[0], s[1], s[2]
		r := rand.New(rand.NewPCG(3, 3))
		a, w := randVec(r, m*k, false), randVec(r, n*k, false)
		c := make([]float32, m*n)
		for _, threads := range benchThreads {
			b.Run(fmt.Sprintf("m%d_%dx%d/t%d", m, n, k, threads), func(b *testing.B) {
				p := NewPool(threads, 0)
				defer p.Close()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.MatMulT(c, a, w, m, n, k)
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func BenchmarkFallbackDot(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	x, y := randVec(r, 768, false), randVec(r, 768, false)
	withPureGo(func() {
		b.SetBytes(8 * 768)
		for i := 0; i < b.N; i++ {
			Dot(x, y)
		}
	})
}

// readRanger streams through its share of a buffer, for bandwidth runs
// interleaved with the kernels they are compared to.
type readRanger struct {
	buf  []byte
	sink uint64
}

func (r *readRanger) Range(lo, hi int) { r.sink += streamRead(r.buf[lo:hi]) }

// fmaRanger runs the FMA probe loop, iters per index.
type fmaRanger struct{ iters int }

func (f *fmaRanger) Range(lo, hi int) {
	for i := lo; i < hi; i++ {
		fmaPeakLoop(f.iters)
	}
}

// minTime keeps the fastest of a series of timings: on a shared machine
// the fastest run is the one least disturbed by other work.
type minTime struct{ d time.Duration }

func (m *minTime) add(d time.Duration) {
	if m.d == 0 || d < m.d {
		m.d = d
	}
}

func (m *minTime) Seconds() float64 { return m.d.Seconds() }

// alternate runs each of runs in turn, n rounds, and returns the fastest
// time of each: alternation makes their ratios robust on a shared machine.
func alternate(n int, runs ...func()) []minTime {
	ts := make([]minTime, len(runs))
	for range n {
		for i, run := range runs {
			t0 := time.Now()
			run()
			ts[i].add(time.Since(t0))
		}
	}
	return ts
}

// BenchmarkDecodeRatio alternates a streaming read of the weight matrix
// with a matvec over it, on the same threads, and reports the matvec's
// share of that read bandwidth ("pct-of-read"), both from their fastest
// runs. Interleaving makes the ratio robust on a shared, noisy machine;
// for a matrix larger than the last-level cache it is the decode roofline
// fraction.
func BenchmarkDecodeRatio(b *testing.B) {
	for _, s := range [][2]int{{2048, 768}, {4096, 4096}, {8192, 2048}, {32000, 768}} {
		n, k := s[0], s[1]
		r := rand.New(rand.NewPCG(5, 5))
		a, w := randVec(r, k, false), randVec(r, n*k, false)
		c := make([]float32, n)
		rr := &readRanger{buf: unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w))}
		for _, threads := range benchThreads {
			b.Run(fmt.Sprintf("%dx%d/t%d", n, k, threads), func(b *testing.B) {
				p := NewPool(threads, 0)
				defer p.Close()
				ts := alternate(b.N,
					func() { p.Do(len(rr.buf), len(rr.buf)/threads, rr) },
					func() { p.MatMulT(c, a, w, 1, n, k) })
				tRead, tMV := ts[0], ts[1]
				bytes := float64(len(rr.buf))
				b.ReportMetric(bytes/tRead.Seconds()/1e9, "read-GB/s")
				b.ReportMetric(bytes/tMV.Seconds()/1e9, "matvec-GB/s")
				b.ReportMetric(100*tRead.Seconds()/tMV.Seconds(), "pct-of-read")
			})
		}
	}
}

// BenchmarkPrefillRatio alternates the FMA probe with a matrix
// multiplication on the same threads and reports the multiplication's
// share of that peak ("pct-of-peak"), both from their fastest runs.
func BenchmarkPrefillRatio(b *testing.B) {
	for _, s := range [][3]int{{64, 2048, 768}, {256, 2048, 768}, {256, 768, 2048}, {64, 1024, 4096}} {
		m, n, k := s[0], s[1], s[2]
		r := rand.New(rand.NewPCG(6, 6))
		a, w := randVec(r, m*k, false), randVec(r, n*k, false)
		c := make([]float32, m*n)
		for _, threads := range benchThreads {
			b.Run(fmt.Sprintf("m%d_%dx%d/t%d", m, n, k, threads), func(b *testing.B) {
				p := NewPool(threads, 0)
				defer p.Close()
				flops := 2 * float64(m*n*k)
				// As many FMA probe iterations per thread as the GEMM's
				// FLOPs would take at peak.
				fr := &fmaRanger{iters: int(flops / float64(threads) / fmaPeakLoop(1))}
				ts := alternate(b.N, func() { p.Do(threads, 1, fr) }, func() { p.MatMulT(c, a, w, m, n, k) })
				tPeak, tMM := ts[0], ts[1]
				b.ReportMetric(flops/tPeak.Seconds()/1e9, "peak-GFLOP/s")
				b.ReportMetric(flops/tMM.Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(100*tPeak.Seconds()/tMM.Seconds(), "pct-of-peak")
			})
		}
	}
}

// BenchmarkAttentionPage compares the strided kernels with one Dot or Axpy
// per row, on the shape of one head over one KV page (16 slots of
// head_dim 64 or 128, rows kv_dim = 4 heads apart).
func BenchmarkAttentionPage(b *testing.B) {
	for _, hd := range []int{64, 128} {
		const slots, heads = 16, 4
		stride := heads * hd
		r := rand.New(rand.NewPCG(7, 7))
		rows := randVec(r, slots*stride, false)
		q := randVec(r, hd, false)
		scores := randVec(r, slots, false)
		out := make([]float32, hd)
		b.Run(fmt.Sprintf("hd%d/Dot", hd), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for s := range scores {
					scores[s] = Dot(q, rows[s*stride:s*stride+hd])
				}
			}
		})
		b.Run(fmt.Sprintf("hd%d/DotStrided", hd), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				DotStrided(scores, q, rows, stride)
			}
		})
		b.Run(fmt.Sprintf("hd%d/Axpy", hd), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for s, a := range scores {
					Axpy(a*1e-9, rows[s*stride:s*stride+hd], out)
				}
			}
		})
		b.Run(fmt.Sprintf("hd%d/AxpyStrided", hd), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				AxpyStrided(out, scores, rows, stride)
			}
		})
	}
}

// benchMatrices returns w (n×k float32) in every Format, the F16 and
// BF16 ones narrowed from it and Q8 quantized from it (only when k is a
// multiple of Q8Block, as Q8 needs).
func benchMatrices(n, k int, w []float32) map[Format]*Matrix {
	out := map[Format]*Matrix{F32: NewF32(n, k, w)}
	for _, f := range []Format{F16, BF16} {
		raw, _ := as16(f, w)
		out[f] = New16(f, n, k, raw)
	}
	if k%Q8Block == 0 {
		q, err := out[F32].QuantizeQ8()
		if err != nil {
			panic(err)
		}
		out[Q8] = q
	}
	return out
}

// matrixBytes views a matrix's element storage as bytes, for the read
// probe.
func matrixBytes(m *Matrix) []byte {
	switch m.format {
	case F32:
		return unsafe.Slice((*byte)(unsafe.Pointer(&m.f32[0])), 4*len(m.f32))
	case Q8:
		return m.q8
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&m.u16[0])), 2*m.rows*m.cols)
}

// BenchmarkFormatRatio is batch-1 decode in every weight format,
// interleaved with the float32 matvec of the same matrix and with a
// streaming read of the format's own bytes: "x-f32" is the speed-up over
// float32, "pct-of-read" the fraction of the read bandwidth of the bytes
// the format really holds (the decode roofline fraction, for matrices
// larger than the last-level cache). Fastest runs of each.
func BenchmarkFormatRatio(b *testing.B) {
	for _, s := range [][2]int{{2048, 768}, {4096, 4096}, {8192, 2048}, {32000, 768}} {
		n, k := s[0], s[1]
		r := rand.New(rand.NewPCG(7, 7))
		a := randVec(r, k, false)
		ms := benchMatrices(n, k, randVec(r, n*k, false))
		c := make([]float32, n)
		for _, f := range []Format{F16, BF16, Q8} {
			rr := &readRanger{buf: matrixBytes(ms[f])}
			rr.buf = rr.buf[:len(rr.buf)&^255]
			for _, threads := range benchThreads {
				b.Run(fmt.Sprintf("%v/%dx%d/t%d", f, n, k, threads), func(b *testing.B) {
					p := NewPool(threads, 0)
					defer p.Close()
					ts := alternate(b.N,
						func() { p.Do(len(rr.buf), len(rr.buf)/threads/256*256, rr) },
						func() { p.MatMulTW(c, a, ms[F32], 1) },
						func() { p.MatMulTW(c, a, ms[f], 1) })
					tRead, tF32, tFmt := ts[0], ts[1], ts[2]
					b.ReportMetric(tF32.Seconds()/tFmt.Seconds(), "x-f32")
					b.ReportMetric(100*tRead.Seconds()/tFmt.Seconds(), "pct-of-read")
					b.ReportMetric(float64(len(rr.buf))/tFmt.Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkFormatPrefill is prefill (m rows) in every format, interleaved
// with the float32 product: "x-f32" is the speed-up over float32.
func BenchmarkFormatPrefill(b *testing.B) {
	m, n, k := 64, 2048, 768
	r := rand.New(rand.NewPCG(8, 8))
	a := randVec(r, m*k, false)
	ms := benchMatrices(n, k, randVec(r, n*k, false))
	c := make([]float32, m*n)
	for _, f := range []Format{F16, BF16, Q8} {
		b.Run(fmt.Sprintf("%v/m%d_%dx%d", f, m, n, k), func(b *testing.B) {
			p := NewPool(1, 0)
			defer p.Close()
			ts := alternate(b.N, func() { p.MatMulTW(c, a, ms[F32], m) }, func() { p.MatMulTW(c, a, ms[f], m) })
			tF32, tFmt := ts[0], ts[1]
			b.ReportMetric(tF32.Seconds()/tFmt.Seconds(), "x-f32")
			b.ReportMetric(2*float64(m*n*k)/tFmt.Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPrefill512 interleaves the float32 prefill product with and
// without the AVX-512 kernels: "x-avx2" is the speed-up, "pct-of-peak"
// the share of the (16-lane) FMA probe.
func BenchmarkPrefill512(b *testing.B) {
	if !use512 {
		b.Skip("no AVX-512 on this machine")
	}
	for _, s := range [][3]int{{64, 2048, 768}, {256, 2048, 768}, {256, 768, 2048}} {
		m, n, k := s[0], s[1], s[2]
		r := rand.New(rand.NewPCG(9, 9))
		a, w := randVec(r, m*k, false), randVec(r, n*k, false)
		c := make([]float32, m*n)
		b.Run(fmt.Sprintf("m%d_%dx%d/t1", m, n, k), func(b *testing.B) {
			p := NewPool(1, 0)
			defer p.Close()
			flops := 2 * float64(m*n*k)
			fr := &fmaRanger{iters: int(flops / fmaPeakLoop(1))}
			ts := alternate(b.N,
				func() { p.Do(1, 1, fr) },
				func() { use512 = false; p.MatMulT(c, a, w, m, n, k); use512 = true },
				func() { p.MatMulT(c, a, w, m, n, k) })
			tPeak, t2, t5 := ts[0], ts[1], ts[2]
			b.ReportMetric(t2.Seconds()/t5.Seconds(), "x-avx2")
			b.ReportMetric(flops/t5.Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(100*tPeak.Seconds()/t5.Seconds(), "pct-of-peak")
		})
	}
}

// BenchmarkVectorExp interleaves Softmax and SiLUMul on the vector and the
// scalar exponential: "x-scalar" is the speed-up (same results).
func BenchmarkVectorExp(b *testing.B) {
	r := rand.New(rand.NewPCG(10, 10))
	const n = 2048
	x, up := randVec(r, n, false), randVec(r, n, false)
	buf := make([]float32, n)
	for _, k := range []struct {
		name string
		run  func()
	}{
		{"Softmax", func() { copy(buf, x); Softmax(buf) }},
		{"SiLUMul", func() { copy(buf, x); SiLUMul(buf, up) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			t := alternate(b.N, k.run, func() { withPureGo(k.run) })
			tv, ts := t[0], t[1]
			b.ReportMetric(ts.Seconds()/tv.Seconds(), "x-scalar")
			b.ReportMetric(tv.Seconds()/n*1e9, "ns/elem")
		})
	}
}

// BenchmarkPaddedStride interleaves the float32 product of an m×k A at
// its own stride k and at paddedStride (as Pool.MatMulTW lays it out):
// "x-unpadded" is the speed-up of the padding.
func BenchmarkPaddedStride(b *testing.B) {
	const m, n = 128, 768
	for _, k := range []int{2048, 8192} {
		lda := paddedStride(m, k)
		if lda == k {
			b.Skip("no padding on this machine")
		}
		r := rand.New(rand.NewPCG(12, 12))
		a, w := randVec(r, m*k, false), randVec(r, n*k, false)
		apad := make([]float32, m*lda)
		for i := range m {
			copy(apad[i*lda:], a[i*k:(i+1)*k])
		}
		c := make([]float32, m*n)
		b.Run(fmt.Sprintf("m%d_%dx%d", m, n, k), func(b *testing.B) {
			ts := alternate(b.N,
				func() { matMulT(c, n, a, k, w, k, m, n, k) },
				func() { matMulT(c, n, apad, lda, w, k, m, n, k) })
			tPlain, tPad := ts[0], ts[1]
			flops := 2 * float64(m*n*k)
			b.ReportMetric(tPlain.Seconds()/tPad.Seconds(), "x-unpadded")
			b.ReportMetric(flops/tPad.Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkHugePages interleaves batch-1 products with the same f32
// weights in memory from newWeights (huge pages where the system has
// them) and in small pages (a plain allocation advised MADV_NOHUGEPAGE,
// as a mapped model file is): "x-small-pages" is the speed-up.
func BenchmarkHugePages(b *testing.B) {
	for _, s := range [][2]int{{32000, 768}, {8192, 2048}} {
		n, k := s[0], s[1]
		r := rand.New(rand.NewPCG(13, 13))
		a, w := randVec(r, k, false), randVec(r, n*k, false)
		huge := CopyF32(n, k, w)
		small := NewF32(n, k, smallPages(n*k))
		copy(small.f32, w)
		c := make([]float32, n)
		for _, threads := range benchThreads {
			b.Run(fmt.Sprintf("%dx%d/t%d", n, k, threads), func(b *testing.B) {
				p := NewPool(threads, 0)
				defer p.Close()
				ts := alternate(b.N, func() { p.MatMulTW(c, a, small, 1) }, func() { p.MatMulTW(c, a, huge, 1) })
				tSmall, tHuge := ts[0], ts[1]
				b.ReportMetric(tSmall.Seconds()/tHuge.Seconds(), "x-small-pages")
				b.ReportMetric(float64(4*n*k)/tHuge.Seconds()/1e9, "GB/s")
			})
		}
	}
}
