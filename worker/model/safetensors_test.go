package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// rawFile assembles a safetensors image from a header and data section.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

// encodeTensors returns WriteSafetensors' bytes for ts without touching disk.
func encodeTensors(t testing.TB, ts []*Tensor, metadata map[string]string) []byte {
	t.Helper()
	out, err := sortedOutTensors(ts)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := encodeSafetensors(&buf, out, metadata); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func f32Bytes(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	encodeFloats(b, vals, F32)
	return b
}

func TestParseSafetensorsValid(t *testing.T) {
	ts := []*Tensor{
		{Name: "w", DType: F32, Shape: []int{2, 2}, Data: f32Bytes(1, 2, 3, 4)},
		{Name: "scalar", DType: BF16, Shape: []int{}, Data: []byte{0x80, 0x3f}},
		{Name: "empty", DType: F16, Shape: []int{0, 5}, Data: []byte{}},
		{Name: "ids", DType: "I64", Shape: []int{1}, Data: make([]byte, 8)},
	}
	img := encodeTensors(t, ts, map[string]string{"format": "pt"})
	got, meta, err := ParseSafetensors(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(meta, map[string]string{"format": "pt"}) {
		t.Errorf("metadata %v", meta)
	}
	byName := map[string]*Tensor{}
	for _, g := range got {
		byName[g.Name] = g
	}
	for _, w := range ts {
		g := byName[w.Name]
		if g == nil || g.DType != w.DType || !reflect.DeepEqual(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("%s: got %+v, want %+v", w.Name, g, w)
		}
	}
	if v, err := byName["scalar"].Float32(); err != nil || !reflect.DeepEqual(v, []float32{1}) {
		t.Errorf("scalar bf16: %v %v", v, err)
	}
	if v, err := byName["empty"].Float32(); err != nil || len(v) != 0 {
		t.Errorf("empty: %v %v", v, err)
	}
	if _, err := byName["ids"].Float32(); !errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), "tensor ids has dtype I64") {
		t.Errorf("I64 Float32: %v", err)
	}
}

func TestParseSafetensorsErrors(t *testing.T) {
	eight := make([]byte, 8)
	for _, tc := range []struct {
		name string
		file []byte
		msg  string
	}{
		{"short", []byte{1, 2, 3}, "file is 3 bytes, shorter than the 8-byte header length (truncated)"},
		{"hostile length", binary.LittleEndian.AppendUint64(nil, 1<<62), "header length 4611686018427387904 exceeds the limit of 104857600 bytes"},
		{"length past end", append(binary.LittleEndian.AppendUint64(nil, 50), "{}"...), "header length 50 exceeds the 2 bytes that follow it (truncated)"},
		{"not an object", rawFile(`[]`, nil), "header does not start with a JSON object"},
		{"bad json", rawFile(`{"a":`, nil), "invalid safetensors file: header entry for tensor \"a\""},
		{"trailing bytes", rawFile(`{} x`, nil), "header has 2 unexpected bytes after the JSON object"},
		{"duplicate", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), `header names "a" twice`},
		{"out of range", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, eight), "tensor a: data_offsets [0, 16] fall outside the 8-byte data section (truncated file?)"},
		{"reversed", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}}`, eight), "data_offsets [8, 4] fall outside"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "tensors a and b overlap at byte 4"},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "data section bytes [0, 4) belong to no tensor"},
		{"uncovered tail", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, eight), "data section has 8 bytes but its tensors cover only 4"},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, eight), "tensor a: data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12"},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, nil), "shape [-1] has dimension -1 out of range"},
		{"overflowing shape", rawFile(`{"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}}`, eight), "shape [1099511627776 1099511627776] has too many elements"},
		{"fractional dim", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, eight), "header entry for tensor \"a\""},
		{"no shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, eight), "tensor a has no shape"},
		{"no dtype", rawFile(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, eight), "tensor a has no dtype"},
		{"three offsets", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}`, eight), "data_offsets has 3 numbers, want 2"},
		{"empty name", rawFile(`{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, eight), "a tensor with an empty name"},
		{"bad metadata", rawFile(`{"__metadata__":{"format":1}}`, nil), "header __metadata__: want a map of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseSafetensors(tc.file)
			if !errors.Is(err, ErrInvalidSafetensors) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v\nwant ErrInvalidSafetensors containing %q", err, tc.msg)
			}
		})
	}
	_, _, err := ParseSafetensors(rawFile(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, []byte{0}))
	if !errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), `tensor a has dtype "F4"`) {
		t.Fatalf("unknown dtype: %v", err)
	}
}

func TestOpenSafetensorsZeroCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	vals := []float32{1, -2, 3.5, math.MaxFloat32}
	// Sorted by name: a at data offset 0, b (6 bytes) at 16, c at 22,
	// which is not 4-byte aligned.
	err := WriteSafetensors(path, []*Tensor{
		{Name: "c", DType: F32, Shape: []int{4}, Data: f32Bytes(vals...)},
		{Name: "b", DType: F16, Shape: []int{3}, Data: []byte{0, 0x3c, 0, 0xc0, 0, 0}}, // 1, -2, 0
		{Name: "a", DType: F32, Shape: []int{2, 2}, Data: f32Bytes(vals...)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata != nil {
		t.Errorf("metadata %v", f.Metadata)
	}
	for _, tc := range []struct {
		name     string
		want     []float32
		zeroCopy bool
	}{
		{"a", vals, true},
		{"b", []float32{1, -2, 0}, false},
		{"c", vals, false},
	} {
		tt := f.Tensor(tc.name)
		v, err := tt.Float32()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v, tc.want) {
			t.Errorf("%s: values %v, want %v", tc.name, v, tc.want)
		}
		if viewed := unsafe.Pointer(&v[0]) == unsafe.Pointer(&tt.Data[0]); viewed != tc.zeroCopy {
			t.Errorf("%s: viewed in place = %v, want %v", tc.name, viewed, tc.zeroCopy)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenSafetensorsFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenSafetensors(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	empty := filepath.Join(dir, "empty.safetensors")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSafetensors(empty); !errors.Is(err, ErrInvalidSafetensors) || !strings.Contains(err.Error(), "file is 0 bytes") {
		t.Errorf("empty: %v", err)
	}
	if _, err := OpenSafetensors(dir); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

// FuzzParseSafetensors feeds arbitrary file images to the header parser.
// Whatever it accepts must be self-consistent and survive a write/parse
// round trip unchanged.
func FuzzParseSafetensors(f *testing.F) {
	f.Add(encodeTensors(f, []*Tensor{
		{Name: "w", DType: F32, Shape: []int{2, 2}, Data: f32Bytes(1, 2, 3, 4)},
		{Name: "s", DType: BF16, Shape: []int{}, Data: []byte{0x80, 0x3f}},
		{Name: "z", DType: F16, Shape: []int{0}, Data: nil},
	}, map[string]string{"format": "pt"}))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"I8","shape":[4],"data_offsets":[4,8]}}   `, make([]byte, 8)))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{}}`, make([]byte, 8)))
	f.Add(rawFile(`{"__metadata__":{"k":"v"}}`, nil))
	f.Add(binary.LittleEndian.AppendUint64(nil, math.MaxUint64))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, meta, err := ParseSafetensors(b)
		if err != nil {
			return
		}
		var covered int
		for _, tt := range ts {
			if len(tt.Data) != tt.NumElements()*tt.DType.Size() {
				t.Fatalf("%s: %d bytes for shape %v %s", tt.Name, len(tt.Data), tt.Shape, tt.DType)
			}
			covered += len(tt.Data)
			if tt.DType.IsFloat() {
				if _, err := tt.Float32(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if covered > len(b) {
			t.Fatalf("tensors cover %d bytes of a %d-byte file", covered, len(b))
		}
		img := encodeTensors(t, ts, meta)
		ts2, meta2, err := ParseSafetensors(img)
		if err != nil {
			t.Fatalf("re-encoded file rejected: %v", err)
		}
		if len(ts2) != len(ts) || len(meta2) != len(meta) {
			t.Fatalf("round trip: %d tensors, %d metadata; want %d, %d", len(ts2), len(meta2), len(ts), len(meta))
		}
		byName := map[string]*Tensor{}
		for _, tt := range ts {
			byName[tt.Name] = tt
		}
		for _, t2 := range ts2 {
			t1 := byName[t2.Name]
			if t1 == nil || t1.DType != t2.DType || !slices.Equal(t1.Shape, t2.Shape) || !bytes.Equal(t1.Data, t2.Data) {
				t.Fatalf("round trip changed %s", t2.Name)
			}
		}
	})
}
