package model

import (
	"encoding/binary"
	"math"
)

// GGML's k-quant super-blocks (Q4_K, Q6_K) hold qkK weights each.
const qkK = 256

// Q4_K super-block: f16 d, f16 dmin, 12 bytes of packed 6-bit sub-block
// scales and mins (8 of each, one per 32 weights), then 128 bytes of
// 4-bit quants. Weight = d·scale·q − dmin·min, q in [0, 15].
const (
	q4KScaleBytes = 12
	q4KBlockBytes = 2 + 2 + q4KScaleBytes + qkK/2
)

// Q6_K super-block: 128 bytes of the quants' low 4 bits (ql), 64 bytes
// of their high 2 bits (qh), 16 int8 sub-block scales (one per 16
// weights), then f16 d. Weight = d·scale·(q − 32), q in [0, 63].
const q6KBlockBytes = qkK/2 + qkK/4 + qkK/16 + 2

// q4KScaleMin unpacks sub-block j's 6-bit scale and min: for j < 4 the
// low 6 bits of bytes j and j+4; for j ≥ 4 the nibbles of byte j+4 with
// the top 2 bits of bytes j−4 (scale) and j (min) above them.
func q4KScaleMin(s []byte, j int) (scale, min uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// decodeQ4K widens Q4_K super-blocks into dst (a multiple of qkK long).
// Each weight is one float32 rounding of the exact value: d·scale·q
// (at most 21 significant bits) and dmin·min (17) are exact in float32,
// so only their difference rounds.
func decodeQ4K(dst []float32, src []byte) {
	for b := 0; b*qkK < len(dst); b++ {
		blk := src[b*q4KBlockBytes : (b+1)*q4KBlockBytes]
		d := f16ToF32(binary.LittleEndian.Uint16(blk))
		dmin := f16ToF32(binary.LittleEndian.Uint16(blk[2:]))
		scales, qs := blk[4:4+q4KScaleBytes], blk[4+q4KScaleBytes:]
		out := dst[b*qkK : (b+1)*qkK]
		// Sub-blocks 2c and 2c+1 share the 32 bytes qs[32c:]: low nibbles, then high.
		for c := range 4 {
			for half := range 2 {
				sc, mn := q4KScaleMin(scales, 2*c+half)
				scale, off := d*float32(sc), dmin*float32(mn)
				for l := range 32 {
					q := qs[32*c+l] >> (4 * half) & 0xf
					out[64*c+32*half+l] = scale*float32(q) - off
				}
			}
		}
	}
}

// decodeQ6K widens Q6_K super-blocks into dst (a multiple of qkK long).
// Each 128-weight half n uses ql[64n:], qh[32n:] and scales[8n:]; within
// it, group g (32 weights) takes nibble g/2 of ql[l+32·(g%2)] and bits
// 2g, 2g+1 of qh[l]. d·(scale·(q−32)) is exact in float32 (at most 23
// significant bits), so the result equals the exact value.
func decodeQ6K(dst []float32, src []byte) {
	for b := 0; b*qkK < len(dst); b++ {
		blk := src[b*q6KBlockBytes : (b+1)*q6KBlockBytes]
		ql, qh, scales := blk[:qkK/2], blk[qkK/2:qkK/2+qkK/4], blk[qkK/2+qkK/4:qkK/2+qkK/4+qkK/16]
		d := f16ToF32(binary.LittleEndian.Uint16(blk[q6KBlockBytes-2:]))
		out := dst[b*qkK : (b+1)*qkK]
		for n := range 2 {
			for g := range 4 {
				for l := range 32 {
					lo := ql[64*n+l+32*(g%2)] >> (4 * (g / 2)) & 0xf
					hi := qh[32*n+l] >> (2 * g) & 3
					q := int32(lo|hi<<4) - 32
					sc := int32(int8(scales[8*n+2*g+l/16]))
					out[128*n+32*g+l] = d * float32(sc*q)
				}
			}
		}
	}
}

// encodeQ4K quantizes src (a multiple of qkK long) into Q4_K
// super-blocks. Each 32-weight sub-block is fit affinely on [lo, hi]
// with lo = min(0, min x): step (hi−lo)/15, offset −lo; the eight steps
// and offsets are then quantized to 6 bits against the super-block's
// largest (d = max step/63, dmin = max offset/63), and every weight to
// the nearest q in [0, 15] under the quantized step and offset.
func encodeQ4K(dst []byte, src []float32) {
	for b := 0; b*qkK < len(src); b++ {
		x := src[b*qkK : (b+1)*qkK]
		blk := dst[b*q4KBlockBytes : (b+1)*q4KBlockBytes]
		var steps, offs [8]float32
		var maxStep, maxOff float32
		for j := range 8 {
			lo, hi := float32(0), float32(math.Inf(-1))
			for _, v := range x[32*j : 32*j+32] {
				lo, hi = min(lo, v), max(hi, v)
			}
			steps[j], offs[j] = (hi-lo)/15, -lo
			maxStep, maxOff = max(maxStep, steps[j]), max(maxOff, offs[j])
		}
		dh, dminh := f32ToF16(maxStep/63), f32ToF16(maxOff/63)
		binary.LittleEndian.PutUint16(blk, dh)
		binary.LittleEndian.PutUint16(blk[2:], dminh)
		d, dmin := f16ToF32(dh), f16ToF32(dminh)
		scales, qs := blk[4:4+q4KScaleBytes], blk[4+q4KScaleBytes:]
		clear(scales)
		clear(qs)
		for j := range 8 {
			sc, mn := quantizeUnsigned(steps[j], d, 63), quantizeUnsigned(offs[j], dmin, 63)
			if j < 4 {
				scales[j] |= sc
				scales[j+4] |= mn
			} else {
				scales[j+4] |= sc&0xf | mn&0xf<<4
				scales[j-4] |= sc >> 4 << 6
				scales[j] |= mn >> 4 << 6
			}
			step, off := d*float32(sc), dmin*float32(mn)
			for l, v := range x[32*j : 32*j+32] {
				q := quantizeUnsigned(v+off, step, 15)
				qs[32*(j/2)+l] |= q << (4 * (j % 2))
			}
		}
	}
}

// encodeQ6K quantizes src (a multiple of qkK long) into Q6_K
// super-blocks: each 16-weight sub-block gets step amax/31, the sixteen
// steps are quantized to int8 against the largest (d = max step/127),
// and every weight to the nearest q−32 in [−32, 31].
func encodeQ6K(dst []byte, src []float32) {
	for b := 0; b*qkK < len(src); b++ {
		x := src[b*qkK : (b+1)*qkK]
		blk := dst[b*q6KBlockBytes : (b+1)*q6KBlockBytes]
		var steps [16]float32
		var maxStep float32
		for s := range 16 {
			var amax float32
			for _, v := range x[16*s : 16*s+16] {
				amax = max(amax, v, -v)
			}
			steps[s] = amax / 31
			maxStep = max(maxStep, steps[s])
		}
		dh := f32ToF16(maxStep / 127)
		d := f16ToF32(dh)
		ql, qh, scales := blk[:qkK/2], blk[qkK/2:qkK/2+qkK/4], blk[qkK/2+qkK/4:qkK/2+qkK/4+qkK/16]
		clear(blk)
		binary.LittleEndian.PutUint16(blk[q6KBlockBytes-2:], dh)
		for s := range 16 {
			sc := quantizeUnsigned(steps[s], d, 127)
			scales[s] = sc
			step := d * float32(sc)
			for i := 16 * s; i < 16*s+16; i++ {
				q := quantizeSigned(x[i], step, 32)
				n, g, l := i/128, i%128/32, i%32
				ql[64*n+l+32*(g%2)] |= q & 0xf << (4 * (g / 2))
				qh[32*n+l] |= q >> 4 << (2 * g)
			}
		}
	}
}

// quantizeUnsigned returns round(v/step) clamped to [0, top] (0 when
// step is zero or v is not a number).
func quantizeUnsigned(v, step float32, top uint8) uint8 {
	if step == 0 {
		return 0
	}
	r := math.Round(float64(v / step))
	if !(r > 0) {
		return 0
	}
	return uint8(min(r, float64(top)))
}

// quantizeSigned returns round(v/step) clamped to [−bias, bias−1], plus
// bias (an unsigned code); bias when step is zero or v is not a number.
func quantizeSigned(v, step float32, bias int) uint8 {
	if step == 0 {
		return uint8(bias)
	}
	r := math.Round(float64(v / step))
	if r != r {
		return uint8(bias)
	}
	return uint8(int(max(-float64(bias), min(r, float64(bias-1)))) + bias)
}
