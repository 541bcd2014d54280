package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Format is how a weight Matrix holds its elements in memory.
type Format uint8

// The weight formats. F16 and BF16 are widened to float32 inside the
// kernels, exactly, so their products equal those of the widened float32
// matrix bit for bit; Q8 is block-quantized (see QuantizeQ8). BF16Dot
// holds the same elements as BF16 but multiplies them with activations
// rounded to bfloat16 (see Matrix.BF16Dot): faster, not exact.
const (
	F32 Format = iota
	F16
	BF16
	Q8
	BF16Dot
)

// String returns the format's name: f32, f16, bf16 or q8.
func (f Format) String() string {
	switch f {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case Q8:
		return "q8"
	case BF16Dot:
		return "bf16-dot"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// BytesPerWeight is the memory one weight occupies, scales included: what
// a matrix-vector product streams per weight.
func (f Format) BytesPerWeight() float64 {
	switch f {
	case F16, BF16, BF16Dot:
		return 2
	case Q8:
		return float64(Q8BlockBytes) / Q8Block
	}
	return 4
}

// Q8 block layout: Q8Block int8 weights followed by their float32 scale
// (little-endian), Q8BlockBytes in all. A weight is q·d with q in
// [-127, 127].
const (
	Q8Block      = 32
	Q8BlockBytes = Q8Block + 4
)

// A Q8 Matrix keeps its rows in groups of q8GroupRows, interleaved block
// by block: block b of a group is q8GroupRows·Q8BlockBytes bytes, the
// Q8Block weights of each of the group's rows in turn, then their
// q8GroupRows scales. A group takes as many bytes as its rows would one
// after another, and the last group is padded with zero rows. The kernels
// then read a matrix as one stream, front to back, in aligned 32-byte
// runs: a batch-1 product of rows kept one after another reads eight
// streams at once in runs that straddle cache lines, which held q8 decode
// to about 40% of the memory's streaming read rate.
const (
	q8GroupRows       = 8
	q8GroupBlockBytes = q8GroupRows * Q8BlockBytes
)

// pad16 is the number of 16-bit elements after the last row of an F16 or
// BF16 matrix: the kernels read whole groups of 8 and mask the excess.
const pad16 = 8

// Matrix is a rows×cols weight matrix, row-major ([out_features,
// in_features], the Hugging Face layout), in one Format. It is immutable
// once built, so any number of goroutines may read it.
type Matrix struct {
	format     Format
	rows, cols int
	f32        []float32
	u16        []uint16 // rows*cols elements, then pad16 zeros
	q8         []byte   // groups of q8GroupRows rows (see q8GroupRows)
}

// ErrQ8Shape reports a matrix whose rows cannot be cut into whole Q8
// blocks.
var ErrQ8Shape = errors.New("kernels: q8 needs a column count that is a multiple of 32")

// NewF32 wraps data (rows×cols float32, used in place, not copied). It
// panics if data is shorter or a dimension is negative.
func NewF32(rows, cols int, data []float32) *Matrix {
	checkDims("NewF32", rows, cols, len(data))
	return &Matrix{format: F32, rows: rows, cols: cols, f32: data[:rows*cols]}
}

// CopyF32 is NewF32 on a copy of data in memory of the matrix's own,
// backed by huge pages where the system has them (see newWeights): for
// weights in a mapped model file, whose 4 KiB pages cost decode a TLB
// miss every few rows.
func CopyF32(rows, cols int, data []float32) *Matrix {
	checkDims("CopyF32", rows, cols, len(data))
	own := newWeights[float32](rows * cols)
	copy(own, data)
	return NewF32(rows, cols, own)
}

// New16 copies rows×cols little-endian 16-bit elements of format f (F16
// or BF16) from data, as a model file holds them. It panics for another
// format, or if data is too short.
func New16(f Format, rows, cols int, data []byte) *Matrix {
	if f != F16 && f != BF16 {
		panic(fmt.Sprintf("kernels: New16 of format %v", f))
	}
	checkDims("New16", rows, cols, len(data)/2)
	u := newWeights[uint16](rows*cols + pad16)
	for i := range rows * cols {
		u[i] = binary.LittleEndian.Uint16(data[2*i:])
	}
	return &Matrix{format: f, rows: rows, cols: cols, u16: u}
}

func checkDims(name string, rows, cols, n int) {
	if rows < 0 || cols < 0 || !fits(rows, cols, n) {
		panic(fmt.Sprintf("kernels: %s of %d×%d from %d elements", name, rows, cols, n))
	}
}

// Format returns the matrix's format.
func (m *Matrix) Format() Format { return m.format }

// Rows returns the number of rows (output features).
func (m *Matrix) Rows() int { return m.rows }

// Cols returns the number of columns (input features).
func (m *Matrix) Cols() int { return m.cols }

// Bytes is the memory the matrix's elements occupy, scales included.
func (m *Matrix) Bytes() int64 {
	return int64(float64(m.rows) * float64(m.cols) * m.format.BytesPerWeight())
}

// Q8Data returns a copy of a Q8 matrix's blocks in the block layout
// above, row after row (nil for another format): what the cuda backend
// uploads.
func (m *Matrix) Q8Data() []byte {
	if m.format != Q8 {
		return nil
	}
	rb := m.q8RowBytes()
	out := make([]byte, m.rows*rb)
	for i := range m.rows {
		m.q8Row(out[i*rb:(i+1)*rb], i)
	}
	return out
}

// q8RowBytes is the bytes of one row's Q8 blocks.
func (m *Matrix) q8RowBytes() int { return m.cols / Q8Block * Q8BlockBytes }

// q8Block returns the weights and the scale's 4 bytes of block b of row i
// in the group layout.
func (m *Matrix) q8Block(i, b int) (weights, scale []byte) {
	r := i % q8GroupRows
	o := i/q8GroupRows*q8GroupRows*m.q8RowBytes() + b*q8GroupBlockBytes
	return m.q8[o+r*Q8Block : o+(r+1)*Q8Block], m.q8[o+q8GroupRows*Q8Block+4*r : o+q8GroupRows*Q8Block+4*r+4]
}

// q8Row writes row i's blocks, one after another, into dst.
func (m *Matrix) q8Row(dst []byte, i int) {
	for b := range m.cols / Q8Block {
		w, d := m.q8Block(i, b)
		copy(dst[b*Q8BlockBytes:], w)
		copy(dst[b*Q8BlockBytes+Q8Block:], d)
	}
}

// setQ8Row stores row i from its blocks one after another in src.
func (m *Matrix) setQ8Row(i int, src []byte) {
	for b := range m.cols / Q8Block {
		w, d := m.q8Block(i, b)
		copy(w, src[b*Q8BlockBytes:])
		copy(d, src[b*Q8BlockBytes+Q8Block:])
	}
}

// newQ8 returns an all-zero Q8 matrix, its last group padded.
func newQ8(rows, cols int) *Matrix {
	groups := (rows + q8GroupRows - 1) / q8GroupRows
	return &Matrix{format: Q8, rows: rows, cols: cols, q8: newWeights[byte](groups * q8GroupRows * (cols / Q8Block * Q8BlockBytes))}
}

// Row writes row i as float32 into dst (len Cols): exactly for F32, F16,
// BF16 and BF16Dot, as q·d (one float32 multiplication) for Q8. It panics if i
// or len(dst) is out of range.
func (m *Matrix) Row(i int, dst []float32) {
	if i < 0 || i >= m.rows || len(dst) != m.cols {
		panic(fmt.Sprintf("kernels: Row %d of a %d×%d matrix into %d elements", i, m.rows, m.cols, len(dst)))
	}
	o := i * m.cols
	switch m.format {
	case F32:
		copy(dst, m.f32[o:o+m.cols])
	case F16:
		F16ToF32(dst, m.u16[o:o+m.cols])
	case BF16, BF16Dot:
		BF16ToF32(dst, m.u16[o:o+m.cols])
	case Q8:
		for b := range m.cols / Q8Block {
			w, ds := m.q8Block(i, b)
			d := math.Float32frombits(binary.LittleEndian.Uint32(ds))
			for t, q := range w {
				dst[b*Q8Block+t] = float32(int8(q)) * d
			}
		}
	}
}

// ErrRange reports a weight that does not fit the format a matrix is
// converted to.
var ErrRange = errors.New("kernels: weight beyond the target format's range")

// Convert returns m in format f, which is F32, F16 or BF16 (QuantizeQ8
// makes Q8): each row is widened exactly (Row) and narrowed to f rounding
// to nearest even (F32ToF16, F32ToBF16), so converting a BF16 matrix to
// F16 rounds each weight once, as a bf16→f16 cast does; weights below
// f's smallest subnormal become zero. A finite weight that would become
// infinite (beyond ±65504 for F16) fails with ErrRange. A matrix already
// in f is returned as it is.
func (m *Matrix) Convert(f Format) (*Matrix, error) {
	if m.format == f {
		return m, nil
	}
	row := make([]float32, m.cols)
	switch f {
	case F32:
		out := newWeights[float32](m.rows * m.cols)
		for i := range m.rows {
			m.Row(i, out[i*m.cols:(i+1)*m.cols])
		}
		return NewF32(m.rows, m.cols, out), nil
	case F16, BF16:
		u := newWeights[uint16](m.rows*m.cols + pad16)
		narrow, widen := F32ToF16, F16ToF32
		if f == BF16 {
			narrow, widen = F32ToBF16, BF16ToF32
		}
		back := make([]float32, m.cols)
		for i := range m.rows {
			m.Row(i, row)
			dst := u[i*m.cols : (i+1)*m.cols]
			narrow(dst, row)
			widen(back, dst)
			for j, v := range back {
				if math.IsInf(float64(v), 0) && !math.IsInf(float64(row[j]), 0) {
					return nil, fmt.Errorf("%w: %g at row %d, column %d does not fit %v", ErrRange, row[j], i, j, f)
				}
			}
		}
		return &Matrix{format: f, rows: m.rows, cols: m.cols, u16: u}, nil
	}
	return nil, fmt.Errorf("kernels: Convert to %v (want f32, f16 or bf16)", f)
}

// QuantizeQ8 returns m block-quantized (the Q8 layouts above): every block
// of 32 weights of a row gets the scale d = amax/127 (amax the largest
// magnitude, float32 division) and q = round-half-even(x·(127/amax)),
// as quantizeQ8Row does for activations. A block holding a NaN or an
// infinity gets a NaN scale, so products with it are NaN. It fails with
// ErrQ8Shape if Cols is not a multiple of 32.
func (m *Matrix) QuantizeQ8() (*Matrix, error) {
	if m.format == Q8 {
		return m, nil
	}
	if m.cols%Q8Block != 0 {
		return nil, fmt.Errorf("%w: %d×%d", ErrQ8Shape, m.rows, m.cols)
	}
	q := newQ8(m.rows, m.cols)
	row := make([]float32, m.cols)
	blocks := make([]byte, q.q8RowBytes())
	for i := range m.rows {
		m.Row(i, row)
		quantizeQ8Row(blocks, row)
		q.setQ8Row(i, blocks)
	}
	return q, nil
}

// quantizeQ8Row writes x (a multiple of Q8Block long) as Q8 blocks into
// dst. Per block: amax = max |x|; d = amax/127; q = RoundToEven(x·id)
// with id = 127/amax (0 when amax is 0), each a float32 operation,
// clamped to ±127 (only a block whose amax is so small that id overflows
// reaches it; there 0·id counts as 0). A block with a NaN or infinity
// gets d = NaN and q = 0.
func quantizeQ8Row(dst []byte, x []float32) {
	for b := 0; b*Q8Block < len(x); b++ {
		blk := x[b*Q8Block : (b+1)*Q8Block]
		out := dst[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		// amax on the bits of |x|: their order is the order of the
		// magnitudes, and anything from the infinity's bits up is not
		// finite.
		var bits uint32
		for _, v := range blk {
			bits = max(bits, math.Float32bits(v)&0x7fffffff)
		}
		if bits >= 0x7f800000 {
			clear(out[:Q8Block])
			binary.LittleEndian.PutUint32(out[Q8Block:], math.Float32bits(float32(math.NaN())))
			continue
		}
		amax := math.Float32frombits(bits)
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		if id > math.MaxFloat32 {
			// amax below 127/MaxFloat32: x·id is ±Inf for every x but
			// 0, which saturates to ±127 (and 0·Inf counts as 0).
			for t, v := range blk {
				var q int8
				switch {
				case v > 0:
					q = 127
				case v < 0:
					q = -127
				}
				out[t] = byte(q)
			}
		} else {
			for t, v := range blk {
				out[t] = byte(int8(roundQ8(float32(v * id))))
			}
		}
		binary.LittleEndian.PutUint32(out[Q8Block:], math.Float32bits(amax/127))
	}
}

// roundQ8 is RoundToEven(p) for |p| < 2^22, in float32: adding 1.5·2^23
// leaves no fraction bits, so the sum rounds p to an integer, ties to
// even. Here |p| = |x·(127/amax)| ≤ 127·(1+2⁻²⁴)², so the result lies in
// [-127, 127] and needs no clamp.
func roundQ8(p float32) int32 {
	const magic = 0x1.8p23
	return int32(float32(p+magic) - magic)
}

// q8Scale reads the float32 scale of the block starting at blk[0].
func q8Scale(blk []byte) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(blk[Q8Block:]))
}
