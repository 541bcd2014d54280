package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// ErrInvalidGGUF reports a GGUF file whose bytes do not describe a valid
// set of metadata and tensors: truncated, a bad magic or version, counts
// or lengths beyond the file, offsets out of range or misaligned.
var ErrInvalidGGUF = errors.New("invalid GGUF file")

// GGUF format constants (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
const (
	ggufMagic            = 0x46554747 // "GGUF" little-endian
	ggufVersion          = 3
	ggufDefaultAlignment = 32
	ggufMaxDims          = 4
	ggufMaxArrayDepth    = 4
	ggufAlignmentKey     = "general.alignment"
)

// GGUFValueType is a metadata value's type tag.
type GGUFValueType uint32

// The metadata value types of GGUF v3.
const (
	GGUFUint8 GGUFValueType = iota
	GGUFInt8
	GGUFUint16
	GGUFInt16
	GGUFUint32
	GGUFInt32
	GGUFFloat32
	GGUFBool
	GGUFString
	GGUFArray
	GGUFUint64
	GGUFInt64
	GGUFFloat64
)

// size returns the encoded size of a fixed-size scalar type, else 0.
func (t GGUFValueType) size() int {
	switch t {
	case GGUFUint8, GGUFInt8, GGUFBool:
		return 1
	case GGUFUint16, GGUFInt16:
		return 2
	case GGUFUint32, GGUFInt32, GGUFFloat32:
		return 4
	case GGUFUint64, GGUFInt64, GGUFFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one value of type t can occupy, so a count
// can be checked against the bytes left before anything is allocated.
func (t GGUFValueType) minSize() int {
	switch t {
	case GGUFString:
		return 8
	case GGUFArray:
		return 12
	}
	return t.size()
}

// GGMLType is a tensor's element type in a GGUF file.
type GGMLType uint32

// The tensor types warden reads and writes.
const (
	GGMLF32  GGMLType = 0
	GGMLF16  GGMLType = 1
	GGMLQ8_0 GGMLType = 8
	GGMLQ4_K GGMLType = 12
	GGMLQ6_K GGMLType = 14
	GGMLBF16 GGMLType = 30
)

// q8_0 block: one f16 scale then 32 int8 quants.
const (
	q80BlockElems = 32
	q80BlockBytes = 2 + q80BlockElems
)

// String names the type as llama.cpp does.
func (t GGMLType) String() string {
	switch t {
	case GGMLF32:
		return "F32"
	case GGMLF16:
		return "F16"
	case GGMLQ8_0:
		return "Q8_0"
	case GGMLQ4_K:
		return "Q4_K"
	case GGMLQ6_K:
		return "Q6_K"
	case GGMLBF16:
		return "BF16"
	}
	return fmt.Sprintf("ggml type %d", uint32(t))
}

// rowBytes returns the bytes of n elements of type t, or an error when
// the type is unsupported or n does not fill whole blocks.
func (t GGMLType) rowBytes(n uint64) (uint64, error) {
	switch t {
	case GGMLF32:
		return 4 * n, nil
	case GGMLF16, GGMLBF16:
		return 2 * n, nil
	case GGMLQ8_0:
		if n%q80BlockElems != 0 {
			return 0, ggufInvalidf("row of %d elements is not a whole number of %d-element Q8_0 blocks", n, q80BlockElems)
		}
		return n / q80BlockElems * q80BlockBytes, nil
	case GGMLQ4_K, GGMLQ6_K:
		if n%qkK != 0 {
			return 0, ggufInvalidf("row of %d elements is not a whole number of %d-element %s super-blocks", n, qkK, t)
		}
		if t == GGMLQ4_K {
			return n / qkK * q4KBlockBytes, nil
		}
		return n / qkK * q6KBlockBytes, nil
	}
	return 0, fmt.Errorf("tensor type %s: %w (GGUF files: F32, F16, BF16, Q8_0, Q4_K, Q6_K)", t, ErrUnsupportedDType)
}

// blockElems is the elements per quantization block of t, 1 for the
// float types.
func (t GGMLType) blockElems() int {
	switch t {
	case GGMLQ8_0:
		return q80BlockElems
	case GGMLQ4_K, GGMLQ6_K:
		return qkK
	}
	return 1
}

// GGUFArrayValue is a metadata array. Values is a typed slice: []uint8,
// []int8, []uint16, []int16, []uint32, []int32, []float32, []bool,
// []string, []uint64, []int64, []float64, or []GGUFArrayValue for nested
// arrays.
type GGUFArrayValue struct {
	Type   GGUFValueType
	Values any
}

// GGUFKV is one metadata entry. Value is a uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64 or
// GGUFArrayValue, as Type says.
type GGUFKV struct {
	Key   string
	Type  GGUFValueType
	Value any
}

// GGUFTensor is one tensor of a GGUF file. Dims are in GGUF order, the
// fastest-varying first (the reverse of a safetensors shape). Data
// aliases the file's mapping.
type GGUFTensor struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64 // from the start of the data section
	Data   []byte
}

// GGUFFile is a parsed GGUF file: metadata in file order and tensors.
type GGUFFile struct {
	Path      string
	Version   uint32
	KV        []GGUFKV
	Tensors   []*GGUFTensor
	Alignment uint64

	kv      map[string]*GGUFKV
	tensors map[string]*GGUFTensor
	mapping []byte
}

// OpenGGUF maps path read-only and parses it; tensor data is not copied.
func OpenGGUF(path string) (*GGUFFile, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("model: %s is not a regular file", path)
	}
	if st.Size() < 24 {
		return nil, fmt.Errorf("model: %s: %w: file is %d bytes, shorter than the GGUF header", path, ErrInvalidGGUF, st.Size())
	}
	if st.Size() > math.MaxInt {
		return nil, fmt.Errorf("model: %s: file of %d bytes cannot be mapped", path, st.Size())
	}
	mapping, err := unix.Mmap(int(fd.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("model: mapping %s: %w", path, err)
	}
	f, err := ParseGGUF(mapping)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("model: %s: %w", path, err), unix.Munmap(mapping))
	}
	f.Path, f.mapping = path, mapping
	return f, nil
}

// Close unmaps the file; its tensors' Data must not be used afterwards.
func (f *GGUFFile) Close() error {
	if f.mapping == nil {
		return nil
	}
	err := unix.Munmap(f.mapping)
	f.mapping, f.Tensors, f.tensors = nil, nil, nil
	if err != nil {
		return fmt.Errorf("model: unmapping %s: %w", f.Path, err)
	}
	return nil
}

// Get returns the metadata entry for key, or nil.
func (f *GGUFFile) Get(key string) *GGUFKV { return f.kv[key] }

// Tensor returns the named tensor, or nil.
func (f *GGUFFile) Tensor(name string) *GGUFTensor { return f.tensors[name] }

// ggufReader decodes from b with every read bounds-checked.
type ggufReader struct {
	b   []byte
	off int
}

func ggufInvalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidGGUF, fmt.Sprintf(format, args...))
}

func (r *ggufReader) need(n uint64) error {
	if n > uint64(len(r.b)-r.off) {
		return ggufInvalidf("need %d bytes at offset %d, %d left (truncated)", n, r.off, len(r.b)-r.off)
	}
	return nil
}

func (r *ggufReader) bytes(n uint64) ([]byte, error) {
	if err := r.need(n); err != nil {
		return nil, err
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *ggufReader) u32() (uint32, error) {
	b, err := r.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *ggufReader) u64() (uint64, error) {
	b, err := r.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (r *ggufReader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// count reads an element count and checks that count values of at least
// minSize bytes each fit in what is left of the file.
func (r *ggufReader) count(minSize int) (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	left := uint64(len(r.b) - r.off)
	if minSize > 0 && n > left/uint64(minSize) {
		return 0, ggufInvalidf("count %d at offset %d exceeds the %d bytes left", n, r.off-8, left)
	}
	return int(n), nil
}

// scalar decodes one fixed-size value.
func (r *ggufReader) scalar(t GGUFValueType) (any, error) {
	b, err := r.bytes(uint64(t.size()))
	if err != nil {
		return nil, err
	}
	switch t {
	case GGUFUint8:
		return b[0], nil
	case GGUFInt8:
		return int8(b[0]), nil
	case GGUFBool:
		if b[0] > 1 {
			return nil, ggufInvalidf("bool value %d", b[0])
		}
		return b[0] == 1, nil
	case GGUFUint16:
		return binary.LittleEndian.Uint16(b), nil
	case GGUFInt16:
		return int16(binary.LittleEndian.Uint16(b)), nil
	case GGUFUint32:
		return binary.LittleEndian.Uint32(b), nil
	case GGUFInt32:
		return int32(binary.LittleEndian.Uint32(b)), nil
	case GGUFFloat32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b)), nil
	case GGUFUint64:
		return binary.LittleEndian.Uint64(b), nil
	case GGUFInt64:
		return int64(binary.LittleEndian.Uint64(b)), nil
	case GGUFFloat64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	}
	return nil, ggufInvalidf("value type %d", t)
}

func (r *ggufReader) value(t GGUFValueType, depth int) (any, error) {
	switch t {
	case GGUFString:
		return r.str()
	case GGUFArray:
		if depth >= ggufMaxArrayDepth {
			return nil, ggufInvalidf("arrays nested deeper than %d", ggufMaxArrayDepth)
		}
		et, err := r.u32()
		if err != nil {
			return nil, err
		}
		return r.array(GGUFValueType(et), depth+1)
	}
	if t.size() == 0 {
		return nil, ggufInvalidf("unknown value type %d at offset %d", t, r.off)
	}
	return r.scalar(t)
}

func (r *ggufReader) array(et GGUFValueType, depth int) (GGUFArrayValue, error) {
	if et > GGUFFloat64 {
		return GGUFArrayValue{}, ggufInvalidf("unknown array element type %d", et)
	}
	n, err := r.count(et.minSize())
	if err != nil {
		return GGUFArrayValue{}, err
	}
	a := GGUFArrayValue{Type: et}
	switch et {
	case GGUFString:
		v := make([]string, n)
		for i := range v {
			if v[i], err = r.str(); err != nil {
				return a, err
			}
		}
		a.Values = v
	case GGUFArray:
		v := make([]GGUFArrayValue, n)
		for i := range v {
			x, err := r.value(GGUFArray, depth)
			if err != nil {
				return a, err
			}
			v[i] = x.(GGUFArrayValue)
		}
		a.Values = v
	case GGUFUint8:
		a.Values, err = scalars[uint8](r, et, n)
	case GGUFInt8:
		a.Values, err = scalars[int8](r, et, n)
	case GGUFUint16:
		a.Values, err = scalars[uint16](r, et, n)
	case GGUFInt16:
		a.Values, err = scalars[int16](r, et, n)
	case GGUFUint32:
		a.Values, err = scalars[uint32](r, et, n)
	case GGUFInt32:
		a.Values, err = scalars[int32](r, et, n)
	case GGUFFloat32:
		a.Values, err = scalars[float32](r, et, n)
	case GGUFBool:
		a.Values, err = scalars[bool](r, et, n)
	case GGUFUint64:
		a.Values, err = scalars[uint64](r, et, n)
	case GGUFInt64:
		a.Values, err = scalars[int64](r, et, n)
	case GGUFFloat64:
		a.Values, err = scalars[float64](r, et, n)
	}
	return a, err
}

func scalars[T any](r *ggufReader, t GGUFValueType, n int) ([]T, error) {
	v := make([]T, n)
	for i := range v {
		x, err := r.scalar(t)
		if err != nil {
			return nil, err
		}
		v[i] = x.(T)
	}
	return v, nil
}

// ParseGGUF parses a whole GGUF v3 file image. Tensors' Data alias b.
// Every count, length and offset is checked against len(b) before use, so
// a hostile file cannot cause a large allocation, an overflow or a panic.
func ParseGGUF(b []byte) (*GGUFFile, error) {
	r := &ggufReader{b: b}
	magic, err := r.u32()
	if err != nil {
		return nil, err
	}
	if magic != ggufMagic {
		return nil, ggufInvalidf("magic %#08x, want GGUF", magic)
	}
	f := &GGUFFile{kv: map[string]*GGUFKV{}, tensors: map[string]*GGUFTensor{}, Alignment: ggufDefaultAlignment}
	if f.Version, err = r.u32(); err != nil {
		return nil, err
	}
	if f.Version != ggufVersion {
		return nil, ggufInvalidf("version %d (supported: %d)", f.Version, ggufVersion)
	}
	nTensors, err := r.u64()
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64()
	if err != nil {
		return nil, err
	}
	left := uint64(len(b) - r.off)
	// A KV is at least 8+4+1 bytes, a tensor info 8+4+4+8 bytes.
	if nKV > left/13 || nTensors > left/24 {
		return nil, ggufInvalidf("%d metadata entries and %d tensors cannot fit in %d bytes", nKV, nTensors, left)
	}
	f.KV = make([]GGUFKV, nKV)
	for i := range f.KV {
		kv := &f.KV[i]
		if kv.Key, err = r.str(); err != nil {
			return nil, err
		}
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		kv.Type = GGUFValueType(t)
		if kv.Value, err = r.value(kv.Type, 0); err != nil {
			return nil, fmt.Errorf("metadata %q: %w", kv.Key, err)
		}
		if _, dup := f.kv[kv.Key]; dup {
			return nil, ggufInvalidf("metadata key %q given twice", kv.Key)
		}
		f.kv[kv.Key] = kv
	}
	if kv := f.kv[ggufAlignmentKey]; kv != nil {
		a, ok := kv.Value.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, ggufInvalidf("%s must be a uint32 power of two, got %v", ggufAlignmentKey, kv.Value)
		}
		f.Alignment = uint64(a)
	}
	f.Tensors = make([]*GGUFTensor, nTensors)
	for i := range f.Tensors {
		t := &GGUFTensor{}
		if t.Name, err = r.str(); err != nil {
			return nil, err
		}
		nd, err := r.u32()
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > ggufMaxDims {
			return nil, ggufInvalidf("tensor %q has %d dimensions (1 to %d)", t.Name, nd, ggufMaxDims)
		}
		t.Dims = make([]uint64, nd)
		for j := range t.Dims {
			if t.Dims[j], err = r.u64(); err != nil {
				return nil, err
			}
		}
		tt, err := r.u32()
		if err != nil {
			return nil, err
		}
		t.Type = GGMLType(tt)
		if t.Offset, err = r.u64(); err != nil {
			return nil, err
		}
		if _, dup := f.tensors[t.Name]; dup {
			return nil, ggufInvalidf("tensor %q given twice", t.Name)
		}
		f.tensors[t.Name] = t
		f.Tensors[i] = t
	}
	dataStart := (uint64(r.off) + f.Alignment - 1) / f.Alignment * f.Alignment
	if dataStart > uint64(len(b)) {
		if len(f.Tensors) == 0 {
			return f, nil
		}
		return nil, ggufInvalidf("data section at %d is past the end of the %d-byte file", dataStart, len(b))
	}
	data := b[dataStart:]
	for _, t := range f.Tensors {
		if err := t.bind(data, f.Alignment); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// bind checks t's size and offset against the data section and sets Data.
func (t *GGUFTensor) bind(data []byte, alignment uint64) error {
	if t.Offset%alignment != 0 {
		return ggufInvalidf("tensor %q at offset %d is not %d-byte aligned", t.Name, t.Offset, alignment)
	}
	elems := uint64(1)
	for _, d := range t.Dims {
		if d > maxTensorDim || (d != 0 && elems > maxTensorDim/d) {
			return ggufInvalidf("tensor %q has dimensions %v out of range", t.Name, t.Dims)
		}
		elems *= d
	}
	rows := uint64(0)
	if t.Dims[0] != 0 {
		rows = elems / t.Dims[0]
	}
	rb, err := t.Type.rowBytes(t.Dims[0])
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	size := rb * rows // both ≤ 2^40·4 and their product ≤ 4·2^40
	if t.Offset > uint64(len(data)) || size > uint64(len(data))-t.Offset {
		return ggufInvalidf("tensor %q: bytes [%d, %d+%d) fall outside the %d-byte data section (truncated?)", t.Name, t.Offset, t.Offset, size, len(data))
	}
	t.Data = data[t.Offset : t.Offset+size : t.Offset+size]
	return nil
}
