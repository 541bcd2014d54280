package model

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// ErrInvalidSafetensors reports a safetensors file whose bytes do not
// describe a valid set of tensors: truncated, a corrupt header, offsets
// out of range or overlapping, sizes that disagree with shapes.
var ErrInvalidSafetensors = errors.New("invalid safetensors file")

// Limits on untrusted headers. maxHeaderLen matches the reference
// implementation; maxTensorDim keeps shape products far from overflow.
const (
	maxHeaderLen = 100 << 20
	maxTensorDim = 1 << 40
	metadataKey  = "__metadata__"
)

// Tensor is one named array of little-endian elements.
//
// For a tensor returned by Load or OpenSafetensors, Data aliases the
// read-only memory mapping of its file: writing to it faults, and it must
// not be used after the Model or File is closed.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements returns the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32 returns the tensor's elements as float32. An F32 tensor whose
// data is 4-byte aligned is returned as a view of Data without copying
// (read-only when Data is a file mapping); F16 and BF16 tensors, and
// unaligned F32 ones, are converted into a new slice on every call, so
// callers should keep the result rather than call Float32 repeatedly.
func (t *Tensor) Float32() ([]float32, error) {
	if !t.DType.IsFloat() {
		return nil, fmt.Errorf("model: tensor %s has dtype %s: %w", t.Name, t.DType, ErrUnsupportedDType)
	}
	n := t.NumElements()
	if len(t.Data) != n*t.DType.Size() {
		return nil, fmt.Errorf("model: tensor %s has %d data bytes, want %d for shape %v %s",
			t.Name, len(t.Data), n*t.DType.Size(), t.Shape, t.DType)
	}
	if n == 0 {
		return []float32{}, nil
	}
	if t.DType == F32 && hostLittleEndian() && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]float32, n)
	decodeFloats(out, t.Data, t.DType)
	return out, nil
}

// hostLittleEndian reports whether float32 views of little-endian file
// bytes can be taken without byte swapping.
func hostLittleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// headerEntry is one tensor's description in a safetensors header.
type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// ParseSafetensors validates a whole safetensors image (a mapped file or
// an upload held in memory) and returns its tensors, in data order, with
// Data aliasing b, plus the header's __metadata__ (nil when absent).
// Errors wrap ErrInvalidSafetensors.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header
// (an object mapping tensor names to {dtype, shape, data_offsets} plus an
// optional "__metadata__" string map, padded with whitespace), then the
// data section. Offsets are relative to the data section; like the
// reference implementation, tensors must tile it exactly, with no gap,
// overlap or trailing bytes.
func ParseSafetensors(b []byte) ([]*Tensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, invalidf("file is %d bytes, shorter than the 8-byte header length (truncated)", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeaderLen {
		return nil, nil, invalidf("header length %d exceeds the limit of %d bytes", n, maxHeaderLen)
	}
	if n > uint64(len(b)-8) {
		return nil, nil, invalidf("header length %d exceeds the %d bytes that follow it (truncated)", n, len(b)-8)
	}
	header := b[8 : 8+n]
	data := b[8+n:]

	entries, metadata, err := decodeHeader(header)
	if err != nil {
		return nil, nil, err
	}
	type placed struct {
		t   *Tensor
		off [2]uint64
	}
	ps := make([]placed, 0, len(entries))
	for _, e := range entries {
		t, off, err := e.tensor(data)
		if err != nil {
			return nil, nil, err
		}
		ps = append(ps, placed{t, off})
	}
	slices.SortFunc(ps, func(x, y placed) int {
		return cmp.Or(cmp.Compare(x.off[0], y.off[0]), cmp.Compare(x.off[1], y.off[1]))
	})
	tensors := make([]*Tensor, len(ps))
	var end uint64
	for i, p := range ps {
		switch {
		case p.off[0] < end:
			return nil, nil, invalidf("tensors %s and %s overlap at byte %d of the data section", ps[i-1].t.Name, p.t.Name, p.off[0])
		case p.off[0] > end:
			return nil, nil, invalidf("data section bytes [%d, %d) belong to no tensor", end, p.off[0])
		}
		end = p.off[1]
		tensors[i] = p.t
	}
	if end != uint64(len(data)) {
		return nil, nil, invalidf("data section has %d bytes but its tensors cover only %d", len(data), end)
	}
	return tensors, metadata, nil
}

type namedEntry struct {
	name string
	headerEntry
}

// decodeHeader parses the JSON header, rejecting duplicate names and
// anything after the closing brace except whitespace padding.
func decodeHeader(header []byte) ([]namedEntry, map[string]string, error) {
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, invalidf("header does not start with a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	if _, err := dec.Token(); err != nil {
		return nil, nil, invalidf("header: %v", err)
	}
	var (
		entries  []namedEntry
		metadata map[string]string
		seen     = map[string]bool{}
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, invalidf("header: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, invalidf("header: unexpected %v", tok)
		}
		if seen[name] {
			return nil, nil, invalidf("header names %q twice", name)
		}
		seen[name] = true
		if name == metadataKey {
			if err := dec.Decode(&metadata); err != nil {
				return nil, nil, invalidf("header %s: want a map of strings: %v", metadataKey, err)
			}
			continue
		}
		e := namedEntry{name: name}
		if err := dec.Decode(&e.headerEntry); err != nil {
			return nil, nil, invalidf("header entry for tensor %q: %v", name, err)
		}
		entries = append(entries, e)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, invalidf("header: %v", err)
	}
	rest := header[dec.InputOffset():]
	if len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, nil, invalidf("header has %d unexpected bytes after the JSON object", len(rest))
	}
	return entries, metadata, nil
}

// tensor checks one header entry against the data section and returns the
// tensor with Data aliasing it.
func (e *namedEntry) tensor(data []byte) (*Tensor, [2]uint64, error) {
	var off [2]uint64
	if e.name == "" {
		return nil, off, invalidf("header has a tensor with an empty name")
	}
	if e.DType == "" {
		return nil, off, invalidf("tensor %s has no dtype", e.name)
	}
	size := e.DType.Size()
	if size == 0 {
		return nil, off, fmt.Errorf("tensor %s has dtype %q: %w", e.name, e.DType, ErrUnsupportedDType)
	}
	if e.Shape == nil {
		return nil, off, invalidf("tensor %s has no shape", e.name)
	}
	if len(e.DataOffsets) != 2 {
		return nil, off, invalidf("tensor %s: data_offsets has %d numbers, want 2", e.name, len(e.DataOffsets))
	}
	off = [2]uint64{e.DataOffsets[0], e.DataOffsets[1]}
	if off[0] > off[1] || off[1] > uint64(len(data)) {
		return nil, off, invalidf("tensor %s: data_offsets [%d, %d] fall outside the %d-byte data section (truncated file?)",
			e.name, off[0], off[1], len(data))
	}
	shape := make([]int, len(*e.Shape))
	limit := uint64(math.MaxInt64) / uint64(size) // keeps the byte count in range
	elems := uint64(1)
	for i, d := range *e.Shape {
		if d < 0 || d > maxTensorDim {
			return nil, off, invalidf("tensor %s: shape %v has dimension %d out of range", e.name, *e.Shape, d)
		}
		shape[i] = int(d)
		if elems != 0 && uint64(d) > limit/elems {
			return nil, off, invalidf("tensor %s: shape %v has too many elements", e.name, *e.Shape)
		}
		elems *= uint64(d)
	}
	if want := elems * uint64(size); off[1]-off[0] != want {
		return nil, off, invalidf("tensor %s: data_offsets [%d, %d] span %d bytes, but shape %v of %s needs %d",
			e.name, off[0], off[1], off[1]-off[0], shape, e.DType, want)
	}
	return &Tensor{
		Name:  e.name,
		DType: e.DType,
		Shape: shape,
		Data:  data[off[0]:off[1]:off[1]],
	}, off, nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSafetensors, fmt.Sprintf(format, args...))
}
