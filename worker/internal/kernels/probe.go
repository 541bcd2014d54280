package kernels

import (
	"encoding/binary"
	"sync"
	"time"
)

// MeasureCopyBandwidth measures the machine's streaming memory bandwidth
// the way batch-1 decode uses it: threads goroutines each stream through
// their share of a buffer of the given size (at least 1 MiB) and only read
// it, the way decode reads every weight once per token. The result is
// bytes read per second, the best of several passes; writes are neither
// made nor counted, so "decode seconds per token ≥ weight bytes ÷ this" is
// the roofline. The buffer should be much larger than the last-level cache
// (256 MiB or more) to measure DRAM rather than cache.
func MeasureCopyBandwidth(bytes int, threads int) (bytesPerSec float64) {
	threads = max(1, threads)
	bytes = max(bytes, 1<<20)
	share := bytes / threads &^ 4095
	buf := make([]byte, share*threads)
	for i := range buf {
		buf[i] = byte(i) // touch every page so the passes do not fault
	}
	best := time.Duration(1<<63 - 1)
	sink := make([]uint64, threads)
	var wg sync.WaitGroup
	for pass := 0; pass < 20; pass++ {
		start := time.Now()
		wg.Add(threads)
		for t := 0; t < threads; t++ {
			go func(t int) {
				defer wg.Done()
				sink[t] += streamRead(buf[t*share : (t+1)*share])
			}(t)
		}
		wg.Wait()
		best = min(best, time.Since(start))
	}
	return float64(len(buf)) / best.Seconds()
}

// MeasureFMAPeak measures the float32 FMA throughput of threads goroutines
// running register-only loops of independent fused multiply-adds (12 chains
// of VFMADD231PS at the widest width the kernels use: 16 lanes with
// AVX-512, 8 under AVX2; 8 scalar chains of multiply and add in the pure-Go
// fallback). An FMA counts as 2
// FLOPs per lane. The result is FLOP/s, the best of several runs of about
// 20 ms.
func MeasureFMAPeak(threads int) (flopsPerSec float64) {
	threads = max(1, threads)
	// Calibrate the iteration count to about 20 ms on one thread.
	iters := 1 << 16
	for {
		start := time.Now()
		fmaPeakLoop(iters)
		if time.Since(start) > 5*time.Millisecond || iters >= 1<<30 {
			break
		}
		iters *= 2
	}
	iters *= 4
	var best float64
	var wg sync.WaitGroup
	for run := 0; run < 10; run++ {
		flops := make([]float64, threads)
		start := time.Now()
		wg.Add(threads)
		for t := 0; t < threads; t++ {
			go func(t int) {
				defer wg.Done()
				// Chunks keep each assembly call short, so the goroutine
				// stays preemptible for the garbage collector.
				for i := 0; i < 20; i++ {
					flops[t] += fmaPeakLoop(iters / 20)
				}
			}(t)
		}
		wg.Wait()
		var total float64
		for _, f := range flops {
			total += f
		}
		best = max(best, total/time.Since(start).Seconds())
	}
	return best
}

// Peaks are a machine's measured limits, the denominators of the engine's
// efficiency figures.
type Peaks struct {
	ReadBandwidth float64 // bytes/s, from MeasureCopyBandwidth
	FMAPeak       float64 // FLOP/s, from MeasureFMAPeak
}

// MeasurePeaks measures both limits for the given thread count with a
// buffer of bufBytes for the bandwidth probe.
func MeasurePeaks(threads, bufBytes int) Peaks {
	return Peaks{
		ReadBandwidth: MeasureCopyBandwidth(bufBytes, threads),
		FMAPeak:       MeasureFMAPeak(threads),
	}
}

// DecodeFraction returns the fraction of the memory-bandwidth roofline
// that batch-1 decode reaches: (weight bytes read per token × tokens/s) ÷
// read bandwidth.
func (p Peaks) DecodeFraction(weightBytesPerToken, tokensPerSec float64) float64 {
	return weightBytesPerToken * tokensPerSec / p.ReadBandwidth
}

// PrefillFraction returns the fraction of the FMA peak that prefill
// reaches: (FLOPs per token × tokens/s) ÷ FMA peak, with FLOPs per token
// typically 2 × parameters of the matrix multiplications.
func (p Peaks) PrefillFraction(flopsPerToken, tokensPerSec float64) float64 {
	return flopsPerToken * tokensPerSec / p.FMAPeak
}

// fmaPeakGo is the fallback's FMA probe: 8 independent float32
// multiply-add chains, 2 FLOPs per element per iteration.
func fmaPeakGo(iters int) (flops float64) {
	a0, a1, a2, a3, a4, a5, a6, a7 := float32(0), float32(0), float32(0), float32(0), float32(0), float32(0), float32(0), float32(0)
	const m, c = 0.5, 0.25
	for i := 0; i < iters; i++ {
		a0 = float32(a0*m) + c
		a1 = float32(a1*m) + c
		a2 = float32(a2*m) + c
		a3 = float32(a3*m) + c
		a4 = float32(a4*m) + c
		a5 = float32(a5*m) + c
		a6 = float32(a6*m) + c
		a7 = float32(a7*m) + c
	}
	if a0+a1+a2+a3+a4+a5+a6+a7 == 1 { // never true; keeps the loop alive
		return 0
	}
	return float64(iters) * 8 * 2
}

// streamReadGo reads p in 8-byte words with 4 independent chains.
func streamReadGo(p []byte) uint64 {
	var x0, x1, x2, x3 uint64
	for len(p) >= 32 {
		x0 ^= binary.LittleEndian.Uint64(p[0:8])
		x1 ^= binary.LittleEndian.Uint64(p[8:16])
		x2 ^= binary.LittleEndian.Uint64(p[16:24])
		x3 ^= binary.LittleEndian.Uint64(p[24:32])
		p = p[32:]
	}
	return x0 ^ x1 ^ x2 ^ x3
}
