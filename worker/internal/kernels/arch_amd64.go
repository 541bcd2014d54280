//go:build amd64

package kernels

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAsm selects the AVX2+FMA assembly. It is decided once at start-up (the
// CPU cannot change under a running process); tests flip it to compare the
// two paths.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA && os.Getenv("WARDEN_KERNELS_PUREGO") == ""

// use512 adds the AVX-512 gemm kernels for prefill (same results:
// they run two canonical 8-lane accumulators per zmm register). The
// environment variable WARDEN_KERNELS_AVX2 switches them off.
var use512 = useAsm && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL &&
	os.Getenv("WARDEN_KERNELS_AVX2") == ""

// useBF16Dot selects the AVX512-BF16 kernels of BF16Dot matrices; without
// them dotBF16Go computes the same bits.
var useBF16Dot = use512 && cpu.X86.HasAVX512BF16

// q8Func is the signature of the q8 dot kernels: one quantized A row
// (blocks Q8 blocks) against groups whole groups of W rows in the group
// layout, q8GroupRows results per group.
type q8Func func(c *float32, a *byte, w *byte, blocks int, groups int)

// q8Kernels is one instruction set's q8 dot kernel. Every set gives the
// same bits (the integer sums are exact; the float operations and their
// order are the same).
type q8Kernels struct {
	name string
	fn   q8Func
}

// The q8 kernel sets: AVX2 (VPMADDUBSW/VPMADDWD), AVX-VNNI (VPDPBUSD on
// ymm) and AVX512-VNNI (VPDPBUSD on zmm, two W rows per register).
var (
	q8AVX2       = q8Kernels{"avx2", q8group}
	q8AVXVNNI    = q8Kernels{"avx-vnni", q8groupv}
	q8AVX512VNNI = q8Kernels{"avx512-vnni", q8groupz}
)

// q8Available lists the q8 kernel sets this CPU runs, fastest first;
// WARDEN_KERNELS_AVX2 leaves only AVX2.
func q8Available() []*q8Kernels {
	var ks []*q8Kernels
	if use512 && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI {
		ks = append(ks, &q8AVX512VNNI)
	}
	if useAsm && cpu.X86.HasAVXVNNI && os.Getenv("WARDEN_KERNELS_AVX2") == "" {
		ks = append(ks, &q8AVXVNNI)
	}
	return append(ks, &q8AVX2)
}

// q8Active is the q8 kernel set in use, chosen once at start-up; tests
// and benchmarks switch it to compare the sets.
var q8Active = q8Available()[0]

// Assembly in kernels_amd64.s. Pointers must be valid for the lengths
// given; the Go wrappers check that.

//go:noescape
func gemm4x3(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x1(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x3(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x1(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x4(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x1(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x8(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x1(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x3h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x1h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x3h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x1h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x4h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x1h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x8h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x1h(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x3b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x1b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x3b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x1b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x4b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x1b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x8b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x1b(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x4z(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x4z(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x4z(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x4zh(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x4zh(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x4zh(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x8z(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x8zh(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x8zb(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x8zpf(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x8zhpf(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x8zbpf(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x4zb(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x4zb(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x4zb(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

// The packed-panel kernels: pack8z<f> widens tiles of 8 W rows of format
// f into a float32 panel (ldw in elements, k a multiple of 8), and
// gemm<r>x8zw runs r rows of A against such a panel (its ldw is unused).
//
//go:noescape
func pack8z(dst *float32, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func pack8zh(dst *float32, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func pack8zb(dst *float32, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm6x8zw(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x8zw(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x8zw(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x8zw(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

// The bf16-products kernels (Matrix.BF16Dot): A and W in bfloat16,
// VDPBF16PS, k a multiple of 32; lda and ldw in elements.
//
//go:noescape
func gemm4x6p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm4x1p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x8p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm3x1p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x8p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm2x1p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x8p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func gemm1x1p(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

//go:noescape
func roundBF16x32(dst *uint16, src *float32, n int)

//go:noescape
func q8group(c *float32, a *byte, w *byte, blocks int, groups int)

//go:noescape
func q8groupv(c *float32, a *byte, w *byte, blocks int, groups int)

//go:noescape
func q8groupz(c *float32, a *byte, w *byte, blocks int, groups int)

//go:noescape
func axpyAVX2(alpha float32, x *float32, y *float32, n int)

//go:noescape
func axpyRowsAVX2(y *float32, n int, alpha *float32, count int, rows *float32, stride int)

//go:noescape
func scaleAVX2(x *float32, s float32, n int)

//go:noescape
func addAVX2(dst *float32, a *float32, b *float32, n int)

//go:noescape
func mulScaleAVX2(out *float32, x *float32, w *float32, s float32, n int)

//go:noescape
func softmaxExpAVX2(x *float32, n int, mx float32) int

//go:noescape
func siluMulAVX2(gate *float32, up *float32, n int) int

// softmaxExp512 and siluMul512 are softmaxExpAVX2 and siluMulAVX2 on
// AVX-512, 32 elements at a time (four interleaved 8-lane exponentials),
// and the last n mod 32 through masked loads and stores.
//
//go:noescape
func softmaxExp512(x *float32, n int, mx float32) int

//go:noescape
func siluMul512(gate *float32, up *float32, n int) int

// maxOf512 returns the largest of x's n > 0 elements, and whether one of
// them is NaN (then mx means nothing).
//
//go:noescape
func maxOf512(x *float32, n int) (mx float32, nan bool)

func fmaPeakAVX2(iters int)

func fmaPeak512(iters int)

//go:noescape
func axpyTile2z(y *float32, ldy int, alpha *float32, lda int, count int, rows *float32, stride int, width int)

//go:noescape
func axpyTile3z(y *float32, ldy int, alpha *float32, lda int, count int, rows *float32, stride int, width int)

//go:noescape
func axpyTile4z(y *float32, ldy int, alpha *float32, lda int, count int, rows *float32, stride int, width int)

//go:noescape
func scaleF64AVX2(x *float32, n int, s float64)

// sum512 is sumF64Go on AVX-512: four 8-lane float64 accumulators over 32
// elements at a time, the last n mod 32 through masked loads (zeros,
// which leave a partial sum as it is), then Softmax's tree.
//
//go:noescape
func sum512(x *float32, n int) float64

//go:noescape
func streamReadAVX2(p *byte, n int) uint64

func dot(a, b []float32) float32 {
	if !useAsm {
		return dotGo(a, b)
	}
	var r float32
	gemm1x1(&r, 0, unsafe.Pointer(&a[0]), 0, unsafe.Pointer(&b[0]), 0, len(a), 1)
	return r
}

func axpy(alpha float32, x, y []float32) {
	if !useAsm {
		axpyGo(alpha, x, y)
		return
	}
	axpyAVX2(alpha, &x[0], &y[0], len(x))
}

func axpyRows(y, alpha, rows []float32, stride int) {
	if !useAsm {
		axpyRowsGo(y, alpha, rows, stride)
		return
	}
	axpyRowsAVX2(&y[0], len(y), &alpha[0], len(alpha), &rows[0], stride)
}

// axpyTileKernels[m] serves m = 2..4 outputs of axpyTile when use512
// holds.
var axpyTileKernels = [5]func(y *float32, ldy int, alpha *float32, lda int, count int, rows *float32, stride int, width int){
	2: axpyTile2z, 3: axpyTile3z, 4: axpyTile4z,
}

// axpyTile runs AxpyTile's outputs in blocks of up to 4 through the
// AVX-512 kernels (the width's multiple of 16; axpyRows does the rest of
// each output), else one axpyRows per output.
func axpyTile(y []float32, m, width, ldy int, alpha []float32, count, lda int, rows []float32, stride int) {
	if !useAsm {
		axpyTileGo(y, m, width, ldy, alpha, count, lda, rows, stride)
		return
	}
	wide := 0
	if use512 {
		wide = width &^ 15
	}
	for i := 0; i < m; {
		r := min(4, m-i)
		done := 0
		if r >= 2 && wide > 0 {
			axpyTileKernels[r](&y[i*ldy], ldy, &alpha[i*lda], lda, count, &rows[0], stride, wide)
			done = wide
		} else {
			r = 1
		}
		if done < width {
			for j := i; j < i+r; j++ {
				axpyRows(y[j*ldy+done:j*ldy+width], alpha[j*lda:j*lda+count], rows[done:], stride)
			}
		}
		i += r
	}
}

// scaleF64 sets x[i] = float32(float64(x[i]) * s), 4 lanes at a time in
// assembly.
func scaleF64(x []float32, s float64) {
	i := 0
	if useAsm {
		i = len(x) &^ 3
		if i > 0 {
			scaleF64AVX2(&x[0], i, s)
		}
	}
	scaleF64Go(x[i:], s)
}

// sumF64 is Softmax's sum of x, on AVX-512 in sum512.
func sumF64(x []float32) float64 {
	if useAsm && use512 && len(x) > 0 {
		return sum512(&x[0], len(x))
	}
	return sumF64Go(x)
}

func scale(x []float32, s float32) {
	if !useAsm {
		scaleGo(x, s)
		return
	}
	scaleAVX2(&x[0], s, len(x))
}

func add(dst, a, b []float32) {
	if !useAsm {
		addGo(dst, a, b)
		return
	}
	addAVX2(&dst[0], &a[0], &b[0], len(dst))
}

func mulScale(out, x, w []float32, s float32) {
	if !useAsm {
		mulScaleGo(out, x, w, s)
		return
	}
	mulScaleAVX2(&out[0], &x[0], &w[0], s, len(out))
}

// gemmFunc is the signature of the gemm micro-kernels.
type gemmFunc func(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)

// gemmKernel is one register-blocked micro-kernel: a block of rows of A
// against tiles of cols rows of W.
type gemmKernel struct {
	cols int
	fn   gemmFunc
	// one handles the columns left over when fewer than cols remain.
	one gemmFunc
}

// gemmKernels[f][r] serves a block of r rows of A (r = 1..4) against W
// in format f (F32, F16, BF16, BF16Dot).
var gemmKernels = [BF16Dot + 1][5]gemmKernel{
	F32:     {1: {8, gemm1x8, gemm1x1}, 2: {4, gemm2x4, gemm2x1}, 3: {3, gemm3x3, gemm3x1}, 4: {3, gemm4x3, gemm4x1}},
	F16:     {1: {8, gemm1x8h, gemm1x1h}, 2: {4, gemm2x4h, gemm2x1h}, 3: {3, gemm3x3h, gemm3x1h}, 4: {3, gemm4x3h, gemm4x1h}},
	BF16:    {1: {8, gemm1x8b, gemm1x1b}, 2: {4, gemm2x4b, gemm2x1b}, 3: {3, gemm3x3b, gemm3x1b}, 4: {3, gemm4x3b, gemm4x1b}},
	BF16Dot: {1: {8, gemm1x8p, gemm1x1p}, 2: {8, gemm2x8p, gemm2x1p}, 3: {8, gemm3x8p, gemm3x1p}, 4: {6, gemm4x6p, gemm4x1p}},
}

// gemm512Kernels[f][r] serves a block of r = 2..4 rows of A against
// tiles of 4 W rows in format f when use512 holds and k is a multiple of 8.
var gemm512Kernels = [3][5]gemmKernel{
	F32:  {2: {4, gemm2x4z, gemm2x1}, 3: {4, gemm3x4z, gemm3x1}, 4: {4, gemm4x4z, gemm4x1}},
	F16:  {2: {4, gemm2x4zh, gemm2x1h}, 3: {4, gemm3x4zh, gemm3x1h}, 4: {4, gemm4x4zh, gemm4x1h}},
	BF16: {2: {4, gemm2x4zb, gemm2x1b}, 3: {4, gemm3x4zb, gemm3x1b}, 4: {4, gemm4x4zb, gemm4x1b}},
}

// gemm512Wide[f] serves blocks of 4 rows of A against tiles of 8 W rows
// (16 accumulators: more FMAs in flight per A broadcast than gemm4x4z).
// With A's rows laid out by paddedStride it was faster than gemm4x4z at
// every k measured (m = 128, n = 768, 2026-12-02): 768 (+12%), 2048
// (+9%), 8192 (+33%).
var gemm512Wide = [3]gemmKernel{
	F32:  {8, gemm4x8z, gemm4x1},
	F16:  {8, gemm4x8zh, gemm4x1h},
	BF16: {8, gemm4x8zb, gemm4x1b},
}

// gemm512WideFirst[f] is gemm512Wide[f] for the first block of A over a
// panel, which streams the panel from memory: it also reads the next tile
// ahead, as the one-row kernels do (asmgen's prefetchedLoop).
var gemm512WideFirst = [3]gemmKernel{
	F32:  {8, gemm4x8zpf, gemm4x1},
	F16:  {8, gemm4x8zhpf, gemm4x1h},
	BF16: {8, gemm4x8zbpf, gemm4x1b},
}

// packKernels[f] packs tiles of W in format f for the gemm<r>x8zw
// kernels, packedKernels[r] (r = 2, 3, 4 or 6 rows of A).
var (
	packKernels   = [3]func(dst *float32, w unsafe.Pointer, ldw int, k int, tiles int){F32: pack8z, F16: pack8zh, BF16: pack8zb}
	packedKernels = [7]gemmFunc{2: gemm2x8zw, 3: gemm3x8zw, 4: gemm4x8zw, 6: gemm6x8zw}
)

// packMinRows[f] is the fewest rows of A for which gemm packs W of format
// f: packing costs about a pass of a block of A over the panel, and each
// block after that reads the panel without widening or inserting a row
// pair (on Intel cores those share the FMA ports). BenchmarkPackedPanels
// on a Xeon with AVX-512 (2026-12-05): packing broke even at about 20
// rows of A for F32 and F16 and 10 for BF16.
var packMinRows = [3]int{F32: 24, F16: 24, BF16: 12}

// packPanelBytes is the size of a packed panel: float32 tiles kept in L2
// while every block of A sweeps over them.
const packPanelBytes = 256 << 10

// packBuffers recycles packed panels between calls; each gemm takes one
// for the whole call.
var packBuffers = sync.Pool{New: func() any { return new([]float32) }}

// gemmPacked is gemm for m >= packMinRows with the AVX-512 kernels and k a
// multiple of 8: each panel of W is widened once into a float32 buffer in
// the order the gemm<r>x8zw kernels read, one zmm per row pair, so every
// output element sees the same fma sequence as in the other kernels.
// Rows of W past the last whole tile, and a last single row of A, go
// through the unpacked kernels.
func gemmPacked(c []float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, f Format, ldw, m, n, k int) {
	size := int(f.BytesPerWeight())
	// At least 3 tiles: with long rows, fewer would read each block of A
	// (6 rows of k floats, 192 KiB at k = 8192) from L2 for too few FMAs.
	panel := max(24, packPanelBytes/(4*k)/8*8)
	bp := packBuffers.Get().(*[]float32)
	defer packBuffers.Put(bp)
	// 64-byte aligned: the kernels load whole cache lines.
	need := min(panel, n/8*8)*k + 16
	if cap(*bp) < need {
		*bp = make([]float32, need)
	}
	buf := (*bp)[:need]
	packed := unsafe.Pointer(&buf[(64-int(uintptr(unsafe.Pointer(&buf[0]))%64))%64/4])
	for j0 := 0; j0 < n; j0 += panel {
		nj := min(panel, n-j0)
		tiles := nj / 8
		if tiles > 0 {
			packKernels[f]((*float32)(packed), unsafe.Add(w, j0*ldw*size), ldw, k, tiles)
		}
		for i := 0; i < m; {
			r := min(6, m-i)
			if r == 5 {
				r = 3
			}
			ci := &c[i*ldc+j0]
			ai := unsafe.Add(a, i*lda*4)
			switch {
			case tiles == 0:
			case r > 1:
				packedKernels[r](ci, ldc, ai, lda, packed, 0, k, tiles)
			default:
				gemmKernels[f][1].fn(ci, ldc, ai, lda, unsafe.Add(w, j0*ldw*size), ldw, k, tiles)
			}
			if left := nj - tiles*8; left > 0 {
				j := j0 + tiles*8
				for i1 := i; i1 < i+r; i1 += 4 {
					r1 := min(4, i+r-i1)
					gemmKernels[f][r1].one(&c[i1*ldc+j], ldc, unsafe.Add(a, i1*lda*4), lda, unsafe.Add(w, j*ldw*size), ldw, k, left)
				}
			}
			i += r
		}
	}
}

// paddedStride returns the row stride for an m×k A that gemm reads
// fastest: k+16 when the AVX-512 kernels take 4 rows of A at a time and
// rows of k floats are a multiple of 4 KiB. Then the 4 rows fall into the
// same L1 sets as one another and as the tile's 8 W rows (12 streams in
// one set of a 12-way L1); 64 bytes more per row spread them over 4 sets.
// BenchmarkPaddedStride: +13-17% at k = 2048, +9-11% at k = 8192; at
// k = 768 (rows 3 KiB apart) padding gained nothing.
func paddedStride(m, k int) int {
	if use512 && m >= 4 && k%1024 == 0 {
		return k + 16
	}
	return k
}

// matMulT computes c[i*ldc+j] = Dot(a[i*lda:][:k], w[j*ldw:][:k]) for
// i < m, j < n. Lengths are checked by the caller; m, n, k > 0.
func matMulT(c []float32, ldc int, a []float32, lda int, w []float32, ldw, m, n, k int) {
	if !useAsm {
		matMulTGo(c, ldc, a, lda, w, ldw, m, n, k)
		return
	}
	gemm(c, ldc, unsafe.Pointer(&a[0]), lda, unsafe.Pointer(&w[0]), F32, ldw, m, n, k)
}

// matMul16 is matMulT with W in F16 or BF16 (f), each row widened
// exactly. w must extend pad16 elements past its last row.
func matMul16(c []float32, ldc int, a []float32, lda int, w []uint16, f Format, ldw, m, n, k int) {
	if !useAsm {
		matMul16Go(c, ldc, a, lda, w, f, ldw, m, n, k)
		return
	}
	gemm(c, ldc, unsafe.Pointer(&a[0]), lda, unsafe.Pointer(&w[0]), f, ldw, m, n, k)
}

// matMulBF16 computes c[i*ldc+j] = the bf16-products dot product of
// a[i*lda:][:k] and w[j*ldw:][:k] (see Matrix.BF16Dot); k is a multiple
// of BF16DotBlock.
func matMulBF16(c []float32, ldc int, a []uint16, lda int, w []uint16, ldw, m, n, k int) {
	if !useAsm || !useBF16Dot {
		matMulBF16Go(c, ldc, a, lda, w, ldw, m, n, k)
		return
	}
	gemm(c, ldc, unsafe.Pointer(&a[0]), lda, unsafe.Pointer(&w[0]), BF16Dot, ldw, m, n, k)
}

// roundBF16 is roundBF16Go, 32 elements at a time by VCVTNE2PS2BF16 where
// the CPU has it.
func roundBF16(dst []uint16, src []float32) {
	n := 0
	if useAsm && useBF16Dot {
		if n = len(src) &^ 31; n > 0 {
			roundBF16x32(&dst[0], &src[0], n)
		}
	}
	roundBF16Go(dst[n:], src[n:])
}

// gemm drives the micro-kernels of format f over A at a (float32, or
// bfloat16 for BF16Dot, rows lda elements apart) and W at w (elements of
// f's size, rows ldw elements apart).
func gemm(c []float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, f Format, ldw, m, n, k int) {
	if use512 && k%8 == 0 && f != BF16Dot && m >= packMinRows[f] {
		gemmPacked(c, ldc, a, lda, w, f, ldw, m, n, k)
		return
	}
	size := int(f.BytesPerWeight())
	aSize := 4
	if f == BF16Dot {
		aSize = 2
	}
	// Panel height: a multiple of every kernel's cols, so only the last
	// panel has leftover columns.
	panel := n
	if m > 1 {
		panel = max(24, l2Panel/(size*k)/24*24)
	}
	kernels := &gemmKernels[f]
	wide := use512 && k%8 == 0 && f != BF16Dot
	for j0 := 0; j0 < n; j0 += panel {
		nj := min(panel, n-j0)
		for i := 0; i < m; i += 4 {
			kr := &kernels[min(4, m-i)]
			if wide && m-i > 1 {
				kr = &gemm512Kernels[f][min(4, m-i)]
				switch {
				case m-i >= 4 && i == 0:
					kr = &gemm512WideFirst[f]
				case m-i >= 4:
					kr = &gemm512Wide[f]
				}
			}
			ci := &c[i*ldc+j0]
			ai := unsafe.Add(a, i*lda*aSize)
			full := nj / kr.cols
			if full > 0 {
				kr.fn(ci, ldc, ai, lda, unsafe.Add(w, j0*ldw*size), ldw, k, full)
			}
			if left := nj - full*kr.cols; left > 0 {
				j := j0 + full*kr.cols
				kr.one(&c[i*ldc+j], ldc, ai, lda, unsafe.Add(w, j*ldw*size), ldw, k, left)
			}
		}
	}
}

// q8Groups computes c[j] = the Q8 dot product of the quantized row a with
// row j of w (the Q8 group layout, starting at a group) for j < len(c). w
// holds whole groups, so the rows past len(c) in the last one are
// computed into a scratch array.
func q8Groups(c []float32, a, w []byte) {
	if !useAsm {
		q8GroupsGo(c, a, w)
		return
	}
	blocks := len(a) / Q8BlockBytes
	full := len(c) / q8GroupRows
	if full > 0 {
		q8Active.fn(&c[0], &a[0], &w[0], blocks, full)
	}
	if rest := len(c) - full*q8GroupRows; rest > 0 {
		var last [q8GroupRows]float32
		q8Active.fn(&last[0], &a[0], &w[full*q8GroupRows*len(a)], blocks, 1)
		copy(c[full*q8GroupRows:], last[:rest])
	}
}

// softmaxExp sets x[i] = float32(exp(float64(x[i] - mx))) (see
// vectorExp).
func softmaxExp(x []float32, mx float32) {
	vectorExp(len(x),
		func(i int) int { return softmaxExp512(&x[i], len(x)-i, mx) },
		func(i int) int { return softmaxExpAVX2(&x[i], len(x)-i, mx) },
		func(lo, hi int) { softmaxExpGo(x[lo:hi], mx) })
}

// maxOf is maxOfGo, 64 elements at a time on AVX-512 for rows without a
// NaN. Only the sign of a zero maximum may differ, which Softmax's x - mx
// and exponential do not see.
func maxOf(x []float32) float32 {
	if useAsm && use512 && len(x) >= 16 {
		if mx, nan := maxOf512(&x[0], len(x)); !nan {
			return mx
		}
	}
	return maxOfGo(x)
}

// siluMul is SiLUMul's loop (see vectorExp).
func siluMul(gate, up []float32) {
	vectorExp(len(gate),
		func(i int) int { return siluMul512(&gate[i], &up[i], len(gate)-i) },
		func(i int) int { return siluMulAVX2(&gate[i], &up[i], len(gate)-i) },
		func(lo, hi int) { siluMulGo(gate[lo:hi], up[lo:hi]) })
}

// vectorExp runs an elementwise loop built on the vector exponential over
// n elements: from index i, k512 (AVX-512, 32 at a time and then the
// tail, masked) and k4 (4 at a time) each do as many as they can and
// return the count, stopping before a group with a lane they cannot take
// (NaN, or an argument above 700); scalar computes [lo, hi) with the
// scalar exp: that group, and the tail. All three give the same bits.
func vectorExp(n int, k512, k4 func(i int) int, scalar func(lo, hi int)) {
	i := 0
	for useAsm && i < n {
		if use512 {
			if i += k512(i); i == n {
				return
			}
		}
		if n-i < 4 {
			break
		}
		if i += k4(i); n-i < 4 {
			break
		}
		scalar(i, i+4)
		i += 4
	}
	scalar(i, n)
}

func fmaPeakLoop(iters int) (flops float64) {
	switch {
	case !useAsm:
		return fmaPeakGo(iters)
	case use512:
		fmaPeak512(iters)
		return float64(iters) * 12 * 16 * 2
	}
	fmaPeakAVX2(iters)
	return float64(iters) * 12 * 8 * 2
}

func streamRead(p []byte) uint64 {
	if !useAsm {
		return streamReadGo(p)
	}
	n := len(p) &^ 255
	if n == 0 {
		return 0
	}
	return streamReadAVX2(&p[0], n)
}
