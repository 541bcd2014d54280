package model

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/warden-ai/warden/internal/tokenizer"
)

// GGUFOutTensor is a tensor to write into a GGUF file: Dims in GGUF order
// (fastest-varying first); Fill writes its Size bytes on demand.
type GGUFOutTensor struct {
	Name string
	Dims []uint64
	Type GGMLType
	Size uint64
	Fill func(dst []byte) error
}

// WriteGGUF writes a GGUF v3 file with the given metadata (in order) and
// tensors (in order, each aligned to 32 bytes), through a temporary file
// renamed into place.
func WriteGGUF(path string, kv []GGUFKV, tensors []GGUFOutTensor) error {
	return writeAtomic(path, func(w *bufio.Writer) error { return encodeGGUF(w, kv, tensors) })
}

type ggufWriter struct {
	w   io.Writer
	n   uint64
	err error
}

func (g *ggufWriter) raw(b []byte) {
	if g.err == nil {
		_, g.err = g.w.Write(b)
		g.n += uint64(len(b))
	}
}

func (g *ggufWriter) u32(v uint32) { g.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (g *ggufWriter) u64(v uint64) { g.raw(binary.LittleEndian.AppendUint64(nil, v)) }
func (g *ggufWriter) str(s string) { g.u64(uint64(len(s))); g.raw([]byte(s)) }

func (g *ggufWriter) scalar(v any) error {
	var b []byte
	switch x := v.(type) {
	case uint8:
		b = []byte{x}
	case int8:
		b = []byte{byte(x)}
	case bool:
		b = []byte{0}
		if x {
			b[0] = 1
		}
	case uint16:
		b = binary.LittleEndian.AppendUint16(nil, x)
	case int16:
		b = binary.LittleEndian.AppendUint16(nil, uint16(x))
	case uint32:
		b = binary.LittleEndian.AppendUint32(nil, x)
	case int32:
		b = binary.LittleEndian.AppendUint32(nil, uint32(x))
	case float32:
		b = binary.LittleEndian.AppendUint32(nil, math.Float32bits(x))
	case uint64:
		b = binary.LittleEndian.AppendUint64(nil, x)
	case int64:
		b = binary.LittleEndian.AppendUint64(nil, uint64(x))
	case float64:
		b = binary.LittleEndian.AppendUint64(nil, math.Float64bits(x))
	case string:
		g.str(x)
		return nil
	case GGUFArrayValue:
		g.u32(uint32(x.Type))
		return g.array(x)
	default:
		return fmt.Errorf("model: GGUF value of type %T", v)
	}
	g.raw(b)
	return nil
}

func (g *ggufWriter) array(a GGUFArrayValue) error {
	switch vs := a.Values.(type) {
	case []string:
		return writeEach(g, vs)
	case []int32:
		return writeEach(g, vs)
	case []uint32:
		return writeEach(g, vs)
	case []float32:
		return writeEach(g, vs)
	case []uint8:
		return writeEach(g, vs)
	case []int8:
		return writeEach(g, vs)
	case []uint16:
		return writeEach(g, vs)
	case []int16:
		return writeEach(g, vs)
	case []bool:
		return writeEach(g, vs)
	case []uint64:
		return writeEach(g, vs)
	case []int64:
		return writeEach(g, vs)
	case []float64:
		return writeEach(g, vs)
	case []GGUFArrayValue:
		return writeEach(g, vs)
	}
	return fmt.Errorf("model: GGUF array of %T", a.Values)
}

func writeEach[T any](g *ggufWriter, vs []T) error {
	g.u64(uint64(len(vs)))
	for _, v := range vs {
		if err := g.scalar(v); err != nil {
			return err
		}
	}
	return nil
}

func (g *ggufWriter) pad() {
	if r := g.n % ggufDefaultAlignment; r != 0 {
		g.raw(make([]byte, ggufDefaultAlignment-r))
	}
}

func encodeGGUF(w io.Writer, kv []GGUFKV, tensors []GGUFOutTensor) error {
	g := &ggufWriter{w: w}
	g.u32(ggufMagic)
	g.u32(ggufVersion)
	g.u64(uint64(len(tensors)))
	g.u64(uint64(len(kv)))
	for _, e := range kv {
		g.str(e.Key)
		g.u32(uint32(e.Type))
		if err := g.scalar(e.Value); err != nil {
			return fmt.Errorf("%s: %w", e.Key, err)
		}
	}
	var off uint64
	for _, t := range tensors {
		g.str(t.Name)
		g.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			g.u64(d)
		}
		g.u32(uint32(t.Type))
		g.u64(off)
		off += (t.Size + ggufDefaultAlignment - 1) / ggufDefaultAlignment * ggufDefaultAlignment
	}
	g.pad()
	var buf []byte
	for _, t := range tensors {
		if uint64(cap(buf)) < t.Size {
			buf = make([]byte, t.Size)
		}
		if err := t.Fill(buf[:t.Size]); err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		g.raw(buf[:t.Size])
		g.pad()
	}
	return g.err
}

// ParseGGMLType reads a user-facing GGUF tensor type: f32, f16, bf16,
// q8_0, q4_k or q6_k.
func ParseGGMLType(s string) (GGMLType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return GGMLF32, nil
	case "f16", "float16":
		return GGMLF16, nil
	case "bf16", "bfloat16":
		return GGMLBF16, nil
	case "q8_0", "q8":
		return GGMLQ8_0, nil
	case "q4_k":
		return GGMLQ4_K, nil
	case "q6_k":
		return GGMLQ6_K, nil
	}
	return 0, fmt.Errorf("%w: GGUF type %q (use f32, f16, bf16, q8_0, q4_k or q6_k)", ErrUnsupportedDType, s)
}

// llama.cpp token types (tokenizer.ggml.token_type).
const (
	ggufTokenNormal      = 1
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
)

// ExportGGUF writes the Llama model in srcDir (config.json, safetensors
// weights, tokenizer.json and tokenizer_config.json) to outPath as a GGUF
// file llama.cpp loads: llama.cpp's tensor names and metadata keys, Q and
// K rows permuted as llama.cpp's convert_hf_to_gguf.py does, matrices and
// the embedding in typ (norms stay F32, as llama.cpp writes them; rows
// that are not whole blocks of typ fall back to Q8_0, or to F16 when not
// whole 32-element blocks either), and the tokenizer as tokenizer.ggml.*
// (model gpt2, byte-level BPE).
func ExportGGUF(srcDir, outPath string, typ GGMLType) error {
	if _, err := typ.rowBytes(0); err != nil {
		return err
	}
	m, err := Load(srcDir)
	if err != nil {
		return err
	}
	defer m.Close()
	c := &m.Config
	if c.Family().Arch != ArchLlama || c.SlidingWindow != nil {
		return fmt.Errorf("model: GGUF export supports Llama models (no sliding window): %w", ErrUnsupportedArchitecture)
	}
	kv := []GGUFKV{
		{"general.architecture", GGUFString, "llama"},
		{"general.name", GGUFString, filepath.Base(srcDir)},
		{"general.file_type", GGUFUint32, ggufFileType(typ)},
		{"llama.context_length", GGUFUint32, uint32(c.MaxPositionEmbeddings)},
		{"llama.embedding_length", GGUFUint32, uint32(c.HiddenSize)},
		{"llama.block_count", GGUFUint32, uint32(c.NumHiddenLayers)},
		{"llama.feed_forward_length", GGUFUint32, uint32(c.IntermediateSize)},
		{"llama.attention.head_count", GGUFUint32, uint32(c.NumAttentionHeads)},
		{"llama.attention.head_count_kv", GGUFUint32, uint32(c.NumKeyValueHeads)},
		{"llama.attention.key_length", GGUFUint32, uint32(c.HeadDim)},
		{"llama.attention.value_length", GGUFUint32, uint32(c.HeadDim)},
		{"llama.rope.freq_base", GGUFFloat32, float32(c.RopeTheta)},
		{"llama.attention.layer_norm_rms_epsilon", GGUFFloat32, float32(c.RMSNormEps)},
		{"llama.rope.dimension_count", GGUFUint32, uint32(c.HeadDim)},
		{"llama.vocab_size", GGUFUint32, uint32(c.VocabSize)},
	}
	if s := c.RopeScaling; s != nil {
		kv = append(kv,
			GGUFKV{ggufLlama3Factor, GGUFFloat64, s.Factor},
			GGUFKV{ggufLlama3LowFreq, GGUFFloat64, s.LowFreqFactor},
			GGUFKV{ggufLlama3HighFreq, GGUFFloat64, s.HighFreqFactor},
			GGUFKV{ggufLlama3OrigCtx, GGUFUint32, uint32(s.OriginalMaxPositionEmbeddings)})
	}
	tkv, err := ggufTokenizerKV(srcDir, c)
	if err != nil {
		return err
	}
	kv = append(kv, tkv...)

	w := m.Weights()
	var ts []GGUFOutTensor
	add := func(name string, t *Tensor, tt GGMLType, permuteHeads int) error {
		// Rows of partial blocks fall back as llama.cpp's converter and
		// quantizer do: to Q8_0 where whole 32-element blocks fit, else F16.
		if cols := t.Shape[len(t.Shape)-1]; cols%tt.blockElems() != 0 {
			tt = GGMLQ8_0
			if cols%q80BlockElems != 0 {
				tt = GGMLF16
			}
		}
		out, err := ggufOutTensor(name, t, tt, permuteHeads)
		if err != nil {
			return err
		}
		ts = append(ts, out)
		return nil
	}
	if err := add("token_embd.weight", w.Embed, typ, 0); err != nil {
		return err
	}
	for i, l := range w.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		for _, e := range []struct {
			name    string
			t       *Tensor
			tt      GGMLType
			permute int
		}{
			{"attn_norm.weight", l.InputNorm, GGMLF32, 0},
			{"attn_q.weight", l.Q, typ, c.NumAttentionHeads},
			{"attn_k.weight", l.K, typ, c.NumKeyValueHeads},
			{"attn_v.weight", l.V, typ, 0},
			{"attn_output.weight", l.O, typ, 0},
			{"ffn_norm.weight", l.PostAttentionNorm, GGMLF32, 0},
			{"ffn_gate.weight", l.Gate, typ, 0},
			{"ffn_up.weight", l.Up, typ, 0},
			{"ffn_down.weight", l.Down, typ, 0},
		} {
			if err := add(p+e.name, e.t, e.tt, e.permute); err != nil {
				return err
			}
		}
	}
	if c.RopeScaling != nil || c.RopeFactors != nil {
		ts = append(ts, ropeFreqsTensor(c))
	}
	if err := add("output_norm.weight", w.Norm, GGMLF32, 0); err != nil {
		return err
	}
	if !c.TieWordEmbeddings {
		if err := add("output.weight", w.LMHead, typ, 0); err != nil {
			return err
		}
	}
	return WriteGGUF(outPath, kv, ts)
}

// Llama 3 RoPE scaling: llama.cpp reads the per-frequency divisors from
// the rope_freqs.weight tensor (as convert_hf_to_gguf.py writes it); warden
// also records the four parameters under its own keys, so that loading the
// file gives back the exact Config (see ggufRope).
const (
	ggufLlama3Factor   = "warden.rope.llama3.factor"
	ggufLlama3LowFreq  = "warden.rope.llama3.low_freq_factor"
	ggufLlama3HighFreq = "warden.rope.llama3.high_freq_factor"
	ggufLlama3OrigCtx  = "warden.rope.llama3.original_context_length"
	ggufRopeFreqs      = "rope_freqs.weight"
)

// ropeFreqsTensor is llama.cpp's rope_freqs.weight: c.RopeFreqFactors()
// in float32.
func ropeFreqsTensor(c *Config) GGUFOutTensor {
	factors := c.RopeFreqFactors()
	return GGUFOutTensor{Name: ggufRopeFreqs, Dims: []uint64{uint64(len(factors))}, Type: GGMLF32, Size: 4 * uint64(len(factors)),
		Fill: func(dst []byte) error {
			for i, v := range factors {
				binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(float32(v)))
			}
			return nil
		}}
}

// ggufFileType is general.file_type (llama_ftype) for typ.
func ggufFileType(typ GGMLType) uint32 {
	switch typ {
	case GGMLF16:
		return 1
	case GGMLQ8_0:
		return 7
	case GGMLBF16:
		return 32
	case GGMLQ4_K:
		return 15 // MOSTLY_Q4_K_M
	case GGMLQ6_K:
		return 18
	}
	return 0
}

// ggufOutTensor converts a [rows, cols] (or 1-D) tensor to typ, permuting
// Q/K rows into llama.cpp's interleaved rotary order when heads > 0.
func ggufOutTensor(name string, t *Tensor, typ GGMLType, heads int) (GGUFOutTensor, error) {
	dims := make([]uint64, len(t.Shape))
	for i, d := range t.Shape {
		dims[len(dims)-1-i] = uint64(d)
	}
	rb, err := typ.rowBytes(dims[0])
	if err != nil {
		return GGUFOutTensor{}, fmt.Errorf("model: %s: %w", name, err)
	}
	rows := uint64(t.NumElements()) / max(dims[0], 1)
	return GGUFOutTensor{Name: name, Dims: dims, Type: typ, Size: rb * rows, Fill: func(dst []byte) error {
		src, err := t.Float32()
		if err != nil {
			return err
		}
		if heads == 0 {
			encodeGGML(dst, src, typ)
			return nil
		}
		tmp := make([]byte, len(dst))
		encodeGGML(tmp, src, typ)
		copy(dst, permuteRotary(tmp, heads, int(rb), false))
		return nil
	}}, nil
}

// permuteRotary reorders the rows (rowBytes bytes each) of a
// [heads·headDim, cols] Q or K matrix between Hugging Face's half-split
// rotary layout and llama.cpp's interleaved one (convert_hf_to_gguf.py's
// permute): in each head, HF row j·headDim/2 + i becomes GGUF row 2i + j.
// inverse undoes it. Rows move whole, so any element type works.
func permuteRotary(src []byte, heads, rowBytes int, inverse bool) []byte {
	rows := len(src) / rowBytes
	hd := rows / heads
	half := hd / 2
	out := make([]byte, len(src))
	for h := range heads {
		for j := range 2 {
			for i := range half {
				from, to := h*hd+j*half+i, h*hd+2*i+j
				if inverse {
					from, to = to, from
				}
				copy(out[to*rowBytes:(to+1)*rowBytes], src[from*rowBytes:(from+1)*rowBytes])
			}
		}
	}
	return out
}

// encodeGGML writes src as typ; Q8_0 blocks are quantized
// as llama.cpp's quantize_row_q8_0_ref does (d = amax/127, q = round(x/d),
// d stored as f16); Q4_K and Q6_K as encodeQ4K and encodeQ6K say.
func encodeGGML(dst []byte, src []float32, typ GGMLType) {
	switch typ {
	case GGMLF32:
		encodeFloats(dst, src, F32)
	case GGMLF16:
		encodeFloats(dst, src, F16)
	case GGMLBF16:
		encodeFloats(dst, src, BF16)
	case GGMLQ8_0:
		for b := 0; b*q80BlockElems < len(src); b++ {
			x := src[b*q80BlockElems : (b+1)*q80BlockElems]
			out := dst[b*q80BlockBytes : (b+1)*q80BlockBytes]
			var amax float32
			for _, v := range x {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			d := amax / 127
			id := float32(0)
			if d != 0 {
				id = 1 / d
			}
			binary.LittleEndian.PutUint16(out, f32ToF16(d))
			for i, v := range x {
				out[2+i] = byte(int8(math.Round(float64(v * id))))
			}
		}
	case GGMLQ4_K:
		encodeQ4K(dst, src)
	case GGMLQ6_K:
		encodeQ6K(dst, src)
	}
}

// decodeGGML converts a tensor's data of typ to float32. A quantized
// block whose f16 scale is infinite or NaN is refused (ErrInvalidGGUF):
// no quantizer writes one, and it would poison every product it enters.
func decodeGGML(dst []float32, src []byte, typ GGMLType) error {
	if err := checkBlockScales(src, typ); err != nil {
		return err
	}
	switch typ {
	case GGMLF32:
		decodeFloats(dst, src, F32)
	case GGMLF16:
		decodeFloats(dst, src, F16)
	case GGMLBF16:
		decodeFloats(dst, src, BF16)
	case GGMLQ8_0:
		for b := 0; b*q80BlockElems < len(dst); b++ {
			in := src[b*q80BlockBytes:]
			d := f16ToF32(binary.LittleEndian.Uint16(in))
			for i := range q80BlockElems {
				dst[b*q80BlockElems+i] = float32(int8(in[2+i])) * d
			}
		}
	case GGMLQ4_K:
		decodeQ4K(dst, src)
	case GGMLQ6_K:
		decodeQ6K(dst, src)
	}
	return nil
}

// checkBlockScales returns ErrInvalidGGUF if any f16 scale of the
// quantized blocks in src is infinite or NaN (exponent bits all ones).
func checkBlockScales(src []byte, typ GGMLType) error {
	var offsets []int
	size := 0
	switch typ {
	case GGMLQ8_0:
		offsets, size = []int{0}, q80BlockBytes
	case GGMLQ4_K:
		offsets, size = []int{0, 2}, q4KBlockBytes
	case GGMLQ6_K:
		offsets, size = []int{q6KBlockBytes - 2}, q6KBlockBytes
	default:
		return nil
	}
	for o := 0; o+size <= len(src); o += size {
		for _, s := range offsets {
			if h := binary.LittleEndian.Uint16(src[o+s:]); h&0x7c00 == 0x7c00 {
				return ggufInvalidf("%s block %d: scale %#04x is not a finite f16", typ, o/size, h)
			}
		}
	}
	return nil
}

// hfTokenizerFile is the part of tokenizer.json the GGUF export reads.
type hfTokenizerFile struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        struct {
		Type   string           `json:"type"`
		Vocab  map[string]int32 `json:"vocab"`
		Merges json.RawMessage  `json:"merges"`
	} `json:"model"`
}

// ggufTokenizerKV builds tokenizer.ggml.* from srcDir's tokenizer.json
// and tokenizer_config.json (byte-level BPE only) for vocab c.VocabSize.
func ggufTokenizerKV(srcDir string, c *Config) ([]GGUFKV, error) {
	data, err := os.ReadFile(filepath.Join(srcDir, tokenizer.TokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("model: GGUF export: %w", err)
	}
	var hf hfTokenizerFile
	if err := json.Unmarshal(data, &hf); err != nil {
		return nil, fmt.Errorf("model: GGUF export: tokenizer.json: %w", err)
	}
	if hf.Model.Type != "BPE" {
		return nil, fmt.Errorf("model: GGUF export: tokenizer model %q (only byte-level BPE)", hf.Model.Type)
	}
	pre := ggufPreFor(hf.PreTokenizer)
	if pre == "" {
		return nil, fmt.Errorf("model: GGUF export: tokenizer.json pre_tokenizer is neither Llama 3's Split nor GPT-2's ByteLevel")
	}
	tokens := make([]string, c.VocabSize)
	types := make([]int32, c.VocabSize)
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), ggufTokenUserDefined
	}
	for s, id := range hf.Model.Vocab {
		if id < 0 || int(id) >= len(tokens) {
			return nil, fmt.Errorf("model: GGUF export: token %q id %d outside the vocabulary of %d", s, id, len(tokens))
		}
		tokens[id], types[id] = s, ggufTokenNormal
	}
	for _, a := range hf.AddedTokens {
		if a.ID < 0 || int(a.ID) >= len(tokens) {
			return nil, fmt.Errorf("model: GGUF export: added token %q id %d outside the vocabulary", a.Content, a.ID)
		}
		tokens[a.ID], types[a.ID] = a.Content, ggufTokenUserDefined
		if a.Special {
			types[a.ID] = ggufTokenControl
		}
	}
	merges, err := hfMerges(hf.Model.Merges)
	if err != nil {
		return nil, err
	}
	kv := []GGUFKV{
		{"tokenizer.ggml.model", GGUFString, "gpt2"},
		{"tokenizer.ggml.pre", GGUFString, pre},
		{"tokenizer.ggml.tokens", GGUFArray, GGUFArrayValue{GGUFString, tokens}},
		{"tokenizer.ggml.token_type", GGUFArray, GGUFArrayValue{GGUFInt32, types}},
		{"tokenizer.ggml.merges", GGUFArray, GGUFArrayValue{GGUFString, merges}},
	}
	if c.BOSTokenID != nil {
		kv = append(kv, GGUFKV{"tokenizer.ggml.bos_token_id", GGUFUint32, uint32(*c.BOSTokenID)})
	}
	// llama.cpp stops at eos, eot and eom: a second and third end token
	// (Llama 3's <|eot_id|>, Llama 3.1's <|eom_id|>) go there.
	for i, id := range c.EOSTokenIDs[:min(len(c.EOSTokenIDs), len(ggufEndTokenKeys))] {
		kv = append(kv, GGUFKV{ggufEndTokenKeys[i], GGUFUint32, uint32(id)})
	}
	kv = append(kv, GGUFKV{"tokenizer.ggml.add_bos_token", GGUFBool, false})
	tok, err := tokenizer.Load(srcDir)
	if err != nil {
		return nil, fmt.Errorf("model: GGUF export: %w", err)
	}
	if t := tok.ChatTemplate(); t != "" {
		kv = append(kv, GGUFKV{"tokenizer.chat_template", GGUFString, t})
	}
	return kv, nil
}

// ggufEndTokenKeys are the metadata keys of the tokens that end
// generation, in the order Config.EOSTokenIDs fills them.
var ggufEndTokenKeys = [...]string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}

// hfMerges reads tokenizer.json merges in either form ("a b" or ["a","b"]).
func hfMerges(raw json.RawMessage) ([]string, error) {
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		return strs, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("model: GGUF export: tokenizer.json merges: %w", err)
	}
	strs = make([]string, len(pairs))
	for i, p := range pairs {
		strs[i] = p[0] + " " + p[1]
	}
	return strs, nil
}

// ggufPreFor names the llama.cpp pre-tokenizer (tokenizer.ggml.pre) of a
// tokenizer.json pre_tokenizer, or "" when there is no equivalent.
func ggufPreFor(raw json.RawMessage) string {
	for pre, want := range ggufPreTokenizers {
		if jsonEqual(raw, []byte(want.preTokenizer)) {
			return pre
		}
	}
	return ""
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
