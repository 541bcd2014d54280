package model

import (
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
)

// Random weights are generated in chunks of initChunk elements, each from
// its own PCG stream keyed by (seed, tensor name, chunk index), so the
// bytes do not depend on how many goroutines generate them or on which
// other tensors exist.
const initChunk = 1 << 16

// sampleScale is √3 / 2³²: it turns the centred sum of four uniform
// 32-bit integers (variance 4 · 2⁶⁴/12) into a unit-variance value.
const sampleScale = 1.7320508075688772 / (1 << 32)

// standardSample returns an approximately standard normal value: the sum
// of four uniform variates (Irwin–Hall), centred and scaled to variance 1.
// Its tails stop at ±2√3 ≈ ±3.46, like a truncated normal. Unlike
// Box–Muller it needs no log, sin or cos, whose results may differ in the
// last bit between architectures (math.Log is assembly on amd64) or Go
// releases; integer sums and one correctly rounded multiplication give the
// same float64 everywhere.
func standardSample(r *rand.PCG) float64 {
	a, b := r.Uint64(), r.Uint64()
	s := a&0xffffffff + a>>32 + b&0xffffffff + b>>32
	return float64(int64(s)-1<<33) * sampleScale
}

// mix64 is SplitMix64's finaliser: it spreads seeds over all 64 bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// distribution is how one tensor's initial values are drawn:
// mean + std·z with z from standardSample.
type distribution struct {
	mean, std float64
}

// fillRandom writes len(dst)/dtype.Size() values drawn from d into dst as
// little-endian dtype elements, using all CPUs. dtype must satisfy IsFloat.
func fillRandom(dst []byte, dtype DType, seed uint64, name string, d distribution) {
	h := fnv.New64a()
	h.Write([]byte(name))
	stream := h.Sum64()
	size := dtype.Size()
	n := len(dst) / size
	chunks := (n + initChunk - 1) / initChunk
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			vals := make([]float32, initChunk)
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				r := rand.NewPCG(mix64(seed), mix64(stream+uint64(c)))
				lo, hi := c*initChunk, min(n, (c+1)*initChunk)
				v := vals[:hi-lo]
				for i := range v {
					// The conversion rounds the product on its own, so no
					// platform may fuse it with the addition (Go spec).
					v[i] = float32(d.mean + float64(d.std*standardSample(r)))
				}
				encodeFloats(dst[lo*size:hi*size], v, dtype)
			}
		})
	}
	wg.Wait()
}
