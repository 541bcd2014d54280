//go:build !amd64

package kernels

// useAsm is false: this architecture has no assembly kernels, so the
// pure-Go implementations always run.
var useAsm = false

// use512 is false: no AVX-512 kernels here either.
var use512 = false

func dot(a, b []float32) float32                    { return dotGo(a, b) }
func axpy(alpha float32, x, y []float32)            { axpyGo(alpha, x, y) }
func axpyRows(y, alpha, rows []float32, stride int) { axpyRowsGo(y, alpha, rows, stride) }
func scale(x []float32, s float32)                  { scaleGo(x, s) }
func add(dst, a, b []float32)                       { addGo(dst, a, b) }
func mulScale(out, x, w []float32, s float32)       { mulScaleGo(out, x, w, s) }
func matMulT(c []float32, ldc int, a []float32, lda int, w []float32, ldw, m, n, k int) {
	matMulTGo(c, ldc, a, lda, w, ldw, m, n, k)
}
func matMul16(c []float32, ldc int, a []float32, lda int, w []uint16, f Format, ldw, m, n, k int) {
	matMul16Go(c, ldc, a, lda, w, f, ldw, m, n, k)
}
func paddedStride(m, k int) int          { return k }
func q8Groups(c []float32, a, w []byte)  { q8GroupsGo(c, a, w) }
func softmaxExp(x []float32, mx float32) { softmaxExpGo(x, mx) }
func maxOf(x []float32) float32          { return maxOfGo(x) }
func scaleF64(x []float32, s float64)    { scaleF64Go(x, s) }
func sumF64(x []float32) float64         { return sumF64Go(x) }
func axpyTile(y []float32, m, width, ldy int, alpha []float32, count, lda int, rows []float32, stride int) {
	axpyTileGo(y, m, width, ldy, alpha, count, lda, rows, stride)
}
func siluMul(gate, up []float32)    { siluMulGo(gate, up) }
func fmaPeakLoop(iters int) float64 { return fmaPeakGo(iters) }
func streamRead(p []byte) uint64    { return streamReadGo(p) }
func matMulBF16(c []float32, ldc int, a []uint16, lda int, w []uint16, ldw, m, n, k int) {
	matMulBF16Go(c, ldc, a, lda, w, ldw, m, n, k)
}

// useBF16Dot is false: BF16Dot matrices use dotBF16Go.
var useBF16Dot = false

func roundBF16(dst []uint16, src []float32) { roundBF16Go(dst, src) }
