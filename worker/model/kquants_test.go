package model

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
)

// refQ4K decodes one Q4_K super-block in float64, written from the
// format's description rather than the decoder's loop: the 12 scale
// bytes are scale[0..3] and min[0..3] in the low 6 bits of bytes 0-3 and
// 4-7, whose top 2 bits are the high bits of scale[4..7] and min[4..7],
// whose low 4 bits are the nibbles of bytes 8-11 (scale low, min high);
// weight i is nibble (i/32)%2 of qs[(i/64)·32 + i%32].
func refQ4K(blk []byte) []float64 {
	d := float64(f16ToF32(binary.LittleEndian.Uint16(blk)))
	dmin := float64(f16ToF32(binary.LittleEndian.Uint16(blk[2:])))
	s := blk[4:16]
	var scale, mn [8]int
	for j := range 4 {
		scale[j], mn[j] = int(s[j]%64), int(s[4+j]%64)
		scale[4+j] = int(s[8+j]%16) + 16*int(s[j]/64)
		mn[4+j] = int(s[8+j]/16) + 16*int(s[4+j]/64)
	}
	out := make([]float64, qkK)
	for i := range out {
		b := blk[16+(i/64)*32+i%32]
		q := int(b % 16)
		if (i/32)%2 == 1 {
			q = int(b / 16)
		}
		sub := i / 32
		out[i] = d*float64(scale[sub])*float64(q) - dmin*float64(mn[sub])
	}
	return out
}

// refQ6K decodes one Q6_K super-block in float64: weight i of half
// n = i/128 (r = i%128, group g = r/32, l = r%32) has its low 4 bits in
// nibble g/2 of ql[64n + 32(g%2) + l], its high 2 bits at bit 2g of
// qh[32n + l], and the int8 scale i/16.
func refQ6K(blk []byte) []float64 {
	ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
	d := float64(f16ToF32(binary.LittleEndian.Uint16(blk[208:])))
	out := make([]float64, qkK)
	for i := range out {
		n, r := i/128, i%128
		g, l := r/32, r%32
		lo := int(ql[64*n+32*(g%2)+l])
		if g >= 2 {
			lo /= 16
		}
		lo %= 16
		hi := int(qh[32*n+l]) >> (2 * g) % 4
		out[i] = d * float64(int8(sc[i/16])) * float64(lo+16*hi-32)
	}
	return out
}

// randomFiniteF16 returns random f16 bits that are neither infinite nor NaN.
func randomFiniteF16(r *rand.Rand) uint16 {
	for {
		if h := uint16(r.Uint32()); h&0x7c00 != 0x7c00 {
			return h
		}
	}
}

// kquantCase is one k-quant type with its block size, decoder,
// reference and the byte offsets of its f16 scales.
type kquantCase struct {
	typ     GGMLType
	size    int
	ref     func([]byte) []float64
	scaleAt []int
}

var kquantCases = []kquantCase{
	{GGMLQ4_K, q4KBlockBytes, refQ4K, []int{0, 2}},
	{GGMLQ6_K, q6KBlockBytes, refQ6K, []int{q6KBlockBytes - 2}},
}

// TestKQuantDecodeMatchesFloat64Reference: every weight decoded from
// random Q4_K and Q6_K super-blocks (random bytes with finite scales, so
// every bit pattern of the quants and packed scales occurs, and blocks
// the encoder wrote) equals the float64 reference rounded to float32.
func TestKQuantDecodeMatchesFloat64Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range kquantCases {
		t.Run(c.typ.String(), func(t *testing.T) {
			const blocks = 64
			src := make([]byte, blocks*c.size)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			for b := range blocks / 2 {
				for _, o := range c.scaleAt {
					binary.LittleEndian.PutUint16(src[b*c.size+o:], randomFiniteF16(r))
				}
			}
			x := make([]float32, blocks/2*qkK)
			for i := range x {
				x[i] = float32(r.NormFloat64()) * float32(1+i%7)
			}
			encodeGGML(src[blocks/2*c.size:], x, c.typ)
			got := make([]float32, blocks*qkK)
			if err := decodeGGML(got, src, c.typ); err != nil {
				t.Fatal(err)
			}
			for b := range blocks {
				want := c.ref(src[b*c.size : (b+1)*c.size])
				for i, w := range want {
					if g := got[b*qkK+i]; g != float32(w) && !(g != g && w != w) {
						t.Fatalf("block %d weight %d: %v, float64 reference %v", b, i, g, w)
					}
				}
			}
		})
	}
}

// TestKQuantEncodeError: the encoder's weights come back within one
// quantization step of the super-block's spread (16 levels for Q4_K, 64
// for Q6_K), and a block of zeros stays zeros.
func TestKQuantEncodeError(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		typ    GGMLType
		size   int
		levels float64
	}{{GGMLQ4_K, q4KBlockBytes, 15}, {GGMLQ6_K, q6KBlockBytes, 62}} {
		t.Run(c.typ.String(), func(t *testing.T) {
			x := make([]float32, 8*qkK)
			for i := range x {
				x[i] = float32(r.NormFloat64() * 0.05)
			}
			clear(x[:qkK])
			buf := make([]byte, 8*c.size)
			encodeGGML(buf, x, c.typ)
			got := make([]float32, len(x))
			if err := decodeGGML(got, buf, c.typ); err != nil {
				t.Fatal(err)
			}
			for b := 0; b < len(x); b += qkK {
				var lo, hi float64
				for _, v := range x[b : b+qkK] {
					lo, hi = min(lo, float64(v)), max(hi, float64(v))
				}
				tol := (hi - lo) / c.levels
				if c.typ == GGMLQ6_K {
					tol = 2 * max(hi, -lo) / c.levels
				}
				for i := b; i < b+qkK; i++ {
					if e := math.Abs(float64(got[i] - x[i])); e > tol || (b == 0 && got[i] != 0) {
						t.Fatalf("weight %d: %v, encoded from %v (tolerance %v)", i, got[i], x[i], tol)
					}
				}
			}
		})
	}
}

// writeKQuantTensors writes a GGUF holding one [2, 256] tensor of each
// k-quant type, encoded from fixed weights; it returns the file's bytes.
func writeKQuantTensors(t testing.TB) []byte {
	t.Helper()
	x := make([]float32, 2*qkK)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) * float32(1+i%5)
	}
	var ts []GGUFOutTensor
	for _, c := range kquantCases {
		ts = append(ts, GGUFOutTensor{Name: c.typ.String(), Dims: []uint64{qkK, 2}, Type: c.typ, Size: uint64(2 * c.size),
			Fill: func(dst []byte) error { encodeGGML(dst, x, c.typ); return nil }})
	}
	path := filepath.Join(t.TempDir(), "k.gguf")
	if err := WriteGGUF(path, []GGUFKV{{"general.architecture", GGUFString, "llama"}}, ts); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// wideFixture writes the tiny preset widened so its matrices have rows
// of whole 256-element super-blocks (hidden 256, intermediate 512, 4
// heads of 64, 2 KV heads) with a 700-token tokenizer, exported to GGUF
// as typ; it returns the model dir and GGUF path.
func wideFixture(t testing.TB, typ GGMLType) (string, string) {
	t.Helper()
	tokDir := t.TempDir()
	if _, err := tokenizer.WritePreset(tokDir, 700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := InitWithTokenizer(dir, PresetTiny, tokDir, 5, F32); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 256, 512, 64
	if err := WriteRandom(dir, cfg, 5, F32); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	if err := ExportGGUF(dir, out, typ); err != nil {
		t.Fatal(err)
	}
	return dir, out
}

// TestGGUFKQuantExport: a Llama model exported as Q4_K or Q6_K holds its
// matrices in that type (norms F32), loads, and every loaded weight is
// the file's block decoded (F32 dequantization at load).
func TestGGUFKQuantExport(t *testing.T) {
	for _, c := range kquantCases {
		t.Run(c.typ.String(), func(t *testing.T) {
			_, path := wideFixture(t, c.typ)
			m, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			checked := 0
			for _, s := range m.Config.TensorSpecs() {
				g := m.gguf.Tensor(ggufName(s.Name))
				if len(s.Shape) == 1 {
					if g.Type != GGMLF32 {
						t.Errorf("%s is %s, want F32", g.Name, g.Type)
					}
					continue
				}
				if g.Type != c.typ {
					t.Fatalf("%s is %s, want %s", g.Name, g.Type, c.typ)
				}
				if s.role == roleQ || s.role == roleK {
					continue // rows permuted at load
				}
				got, err := m.Float32(s.Name)
				if err != nil {
					t.Fatal(err)
				}
				for b := 0; b < len(g.Data)/c.size; b++ {
					for i, w := range c.ref(g.Data[b*c.size : (b+1)*c.size]) {
						if got[b*qkK+i] != float32(w) {
							t.Fatalf("%s[%d]: %v, block decodes to %v", s.Name, b*qkK+i, got[b*qkK+i], w)
						}
					}
				}
				checked++
			}
			if checked < 8 {
				t.Fatalf("only %d tensors checked", checked)
			}
		})
	}
}

// TestGGUFKQuantRefusesMalformed: rows that are not whole super-blocks
// are refused when parsing, a non-finite scale when loading, both as
// ErrInvalidGGUF naming the type and never with a panic.
func TestGGUFKQuantRefusesMalformed(t *testing.T) {
	data := writeKQuantTensors(t)
	f, err := ParseGGUF(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kquantCases {
		g := f.Tensor(c.typ.String())
		vals := make([]float32, 2*qkK)
		if err := decodeGGML(vals, g.Data, c.typ); err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		for _, o := range c.scaleAt {
			bad := append([]byte(nil), g.Data...)
			binary.LittleEndian.PutUint16(bad[c.size+o:], 0x7e00) // NaN in block 1
			err := decodeGGML(vals, bad, c.typ)
			if !errors.Is(err, ErrInvalidGGUF) || !strings.Contains(err.Error(), c.typ.String()+" block 1") {
				t.Errorf("%s with a NaN scale at byte %d: %v", c.typ, o, err)
			}
		}
		var ts []GGUFOutTensor
		ts = append(ts, GGUFOutTensor{Name: "x", Dims: []uint64{128, 2}, Type: c.typ, Size: uint64(len(g.Data)),
			Fill: func(dst []byte) error { copy(dst, g.Data); return nil }})
		path := filepath.Join(t.TempDir(), "bad.gguf")
		if err := WriteGGUF(path, nil, ts); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if _, err := ParseGGUF(b); !errors.Is(err, ErrInvalidGGUF) || !strings.Contains(err.Error(), "256-element "+c.typ.String()) {
			t.Errorf("%s row of 128: %v", c.typ, err)
		}
	}
}
