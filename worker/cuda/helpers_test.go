//go:build cuda

package cuda

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"gorgonia.org/cu"
)

// These tests need an NVIDIA GPU (compute capability 8.0+): the test
// binary exits in gorgonia.org/cu's init on a machine without a driver.
// scripts/gpu-check.sh builds them here and runs them on a GPU machine.

// testDev is GPU 0 with the kernels loaded, a stream, and the device
// buffers a test allocated (freed at cleanup).
type testDev struct {
	t      *testing.T
	d      *device
	k      *kernels
	s      cu.Stream
	allocs []cu.DevicePtr
}

func newTestDev(t *testing.T) *testDev {
	t.Helper()
	d, err := openDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	td := &testDev{t: t, d: d}
	td.do(func() error {
		var err error
		if td.k, err = loadKernels(d.ptxArch()); err != nil {
			return err
		}
		td.s, err = cu.MakeStream(cu.DefaultStream)
		return err
	})
	t.Cleanup(func() {
		d.do(func() error {
			td.s.Synchronize()
			for _, p := range td.allocs {
				cu.MemFree(p)
			}
			td.s.Destroy()
			td.k.unload()
			return nil
		})
		d.release()
	})
	return td
}

// do runs f inside the device's context and fails the test on error.
func (td *testDev) do(f func() error) {
	td.t.Helper()
	if err := td.d.do(f); err != nil {
		td.t.Fatal(err)
	}
}

// alloc returns n bytes of device memory filled with the poison NaN, so an
// output a kernel fails to write is visible.
func (td *testDev) alloc(n int) cu.DevicePtr {
	td.t.Helper()
	var p cu.DevicePtr
	td.do(func() error {
		var err error
		if p, err = cu.MemAlloc(int64(max(n, 4))); err != nil {
			return err
		}
		td.allocs = append(td.allocs, p)
		return cu.MemsetD32(p, 0x7FC0DEAD, int64(max(n, 4)/4))
	})
	return p
}

// upload returns a device copy of b.
func (td *testDev) upload(b []byte) cu.DevicePtr {
	td.t.Helper()
	p := td.alloc(len(b))
	td.write(p, b)
	return p
}

// write copies b to device address p.
func (td *testDev) write(p cu.DevicePtr, b []byte) {
	td.t.Helper()
	if len(b) == 0 {
		return
	}
	td.do(func() error { return cu.MemcpyHtoD(p, unsafe.Pointer(&b[0]), int64(len(b))) })
}

// read returns n bytes from device address p, after the stream's work.
func (td *testDev) read(p cu.DevicePtr, n int) []byte {
	td.t.Helper()
	b := make([]byte, n)
	td.do(func() error {
		if err := td.s.Synchronize(); err != nil {
			return err
		}
		return cu.MemcpyDtoH(unsafe.Pointer(&b[0]), p, int64(n))
	})
	return b
}

// readFloats returns n float32s from p.
func (td *testDev) readFloats(p cu.DevicePtr, n int) []float32 {
	b := td.read(p, 4*n)
	return append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)...)
}

// readInts returns n int32s from p.
func (td *testDev) readInts(p cu.DevicePtr, n int) []int32 {
	b := td.read(p, 4*n)
	return append([]int32(nil), unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), n)...)
}

// randFloats returns n values in about [-1, 1).
func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.Float64()*2 - 1)
	}
	return v
}

// encodeWeights returns n random weights as device bytes of type t and
// their exact float32 values. bfloat16 values are float32s cut to 16 bits;
// float16 values have exponents in [-5, 2] so all are normal; q8 (n a
// multiple of q8Block) has random quants and block scales, a value being
// the float32 product q·scale the kernel computes.
func encodeWeights(r *rand.Rand, t wtype, n int, scale float32) ([]byte, []float32) {
	vals := make([]float32, n)
	switch t {
	case wQ8:
		out := make([]byte, n/q8Block*q8BlockBytes)
		for b := range n / q8Block {
			blk := out[b*q8BlockBytes : (b+1)*q8BlockBytes]
			d := float32(r.Float64()+0.5) * scale / 127
			binary.LittleEndian.PutUint32(blk[q8Block:], math.Float32bits(d))
			for i := range q8Block {
				q := int8(r.IntN(255) - 127)
				blk[i] = byte(q)
				vals[b*q8Block+i] = float32(q) * d
			}
		}
		return out, vals
	case wF32:
		for i := range vals {
			vals[i] = float32(r.Float64()*2-1) * scale
		}
		return sliceBytes(vals), vals
	case wBF16:
		bits := make([]uint16, n)
		for i := range vals {
			b := uint16(math.Float32bits(float32(r.Float64()*2-1)*scale) >> 16)
			bits[i] = b
			vals[i] = math.Float32frombits(uint32(b) << 16)
		}
		return sliceBytes(bits), vals
	default:
		bits := make([]uint16, n)
		for i := range vals {
			sign, exp, mant := uint16(r.IntN(2)), uint16(10+r.IntN(8)), uint16(r.IntN(1024))
			bits[i] = sign<<15 | exp<<10 | mant
			v := (1 + float64(mant)/1024) * math.Ldexp(1, int(exp)-15)
			if sign == 1 {
				v = -v
			}
			vals[i] = float32(v)
		}
		return sliceBytes(bits), vals
	}
}

// isPoison reports whether v has the poison NaN's bits.
func isPoison(v float32) bool { return math.Float32bits(v) == 0x7FC0DEAD }
