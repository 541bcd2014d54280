package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// DType is a safetensors element type, spelled as in the file header.
type DType string

// The element types the engine computes with.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
)

// ErrUnsupportedDType reports a tensor (or a requested output type) whose
// element type is not F32, F16 or BF16.
var ErrUnsupportedDType = errors.New("unsupported dtype (supported: F32, F16, BF16)")

// Size returns the bytes per element of every whole-byte safetensors dtype
// and 0 for anything else. Files may hold tensors of any of these types
// (they are validated and skipped); only F32, F16 and BF16 convert to
// float32.
func (d DType) Size() int {
	switch d {
	case "BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2":
		return 1
	case F16, BF16, "I16", "U16":
		return 2
	case F32, "I32", "U32":
		return 4
	case "F64", "I64", "U64":
		return 8
	}
	return 0
}

// IsFloat reports whether d is F32, F16 or BF16.
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 }

// TorchName returns the name config.json's torch_dtype uses for d
// ("float32", "float16", "bfloat16"), or "" for other types.
func (d DType) TorchName() string {
	switch d {
	case F32:
		return "float32"
	case F16:
		return "float16"
	case BF16:
		return "bfloat16"
	}
	return ""
}

// ParseDType reads a user-facing dtype name: f32/float32, f16/float16 or
// bf16/bfloat16, in any case.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return F32, nil
	case "f16", "float16", "half":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	}
	return "", fmt.Errorf("%w: %q (use f32, bf16 or f16)", ErrUnsupportedDType, s)
}

// decodeFloats converts little-endian elements of type d in src into dst
// (len(dst) elements). d must satisfy IsFloat.
func decodeFloats(dst []float32, src []byte, d DType) {
	switch d {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = bf16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = f16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}
}

// encodeFloats writes src as little-endian elements of type d into dst,
// rounding to nearest even. d must satisfy IsFloat.
func encodeFloats(dst []byte, src []float32, d DType) {
	switch d {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], f32ToBF16(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], f32ToF16(v))
		}
	}
}

// bf16ToF32 widens a bfloat16 (the top half of a float32) exactly.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds to nearest even; NaNs stay NaN (quiet), keeping sign.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// f16ToF32 widens an IEEE binary16 exactly, subnormals included.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0: // zero or subnormal: mant × 2^-24, exact in float32
		f := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(f))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// f32ToF16 rounds to the nearest binary16, ties to even, producing
// subnormals and ±Inf on underflow and overflow; NaNs stay NaN (quiet).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // binary16 biased exponent
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0: // binary16 subnormal (or zero): value = r × 2^-24
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	// Normal: a carry out of the mantissa correctly bumps the exponent,
	// up to infinity.
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}
