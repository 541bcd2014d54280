//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"
)

// FreeMemory returns the free memory of GPU ordinal, device-wide. It goes
// through the device's primary context — the one a Backend uses — so
// called after FromModel it is the memory left with the weights and the
// step scratch resident: the number the KV pool is sized from.
func FreeMemory(ordinal int) (int64, error) {
	d, err := openDevice(ordinal)
	if err != nil {
		return 0, err
	}
	defer d.release()
	var free int64
	err = d.do(func() error {
		f, _, err := cu.MemInfo()
		free = f
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: free memory of %s: %w", d.name, err)
	}
	return free, nil
}

// MeasureCopyBandwidth measures the device's memory bandwidth as a
// device-to-device copy of bytes bytes sees it: the best of several
// copies, counting the bytes read and the bytes written (2·bytes per copy),
// since that is the memory traffic a copy sustains and what a decode step,
// which streams every weight once, can at best approach. Decode's roofline
// is DecodeWeightBytes ÷ this. It allocates two buffers of bytes.
func (b *Backend) MeasureCopyBandwidth(bytes int64) (float64, error) {
	var best float64
	err := b.dev.do(func() error {
		src, err := cu.MemAlloc(bytes)
		if err != nil {
			return fmt.Errorf("cuda: bandwidth probe: %w", err)
		}
		defer cu.MemFree(src)
		dst, err := cu.MemAlloc(bytes)
		if err != nil {
			return fmt.Errorf("cuda: bandwidth probe: %w", err)
		}
		defer cu.MemFree(dst)
		s, err := cu.MakeStream(cu.DefaultStream)
		if err != nil {
			return fmt.Errorf("cuda: bandwidth probe: %w", err)
		}
		defer s.Destroy()
		start, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			return fmt.Errorf("cuda: bandwidth probe: %w", err)
		}
		defer cu.DestroyEvent(&start)
		end, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			return fmt.Errorf("cuda: bandwidth probe: %w", err)
		}
		defer cu.DestroyEvent(&end)
		if err := cu.MemsetD32Async(src, 1, bytes/4, s); err != nil {
			return fmt.Errorf("cuda: bandwidth probe: %w", err)
		}
		for range 12 {
			if err := start.Record(s); err != nil {
				return fmt.Errorf("cuda: bandwidth probe: %w", err)
			}
			if err := cu.MemcpyAsync(dst, src, bytes, s); err != nil {
				return fmt.Errorf("cuda: bandwidth probe: %w", err)
			}
			if err := end.Record(s); err != nil {
				return fmt.Errorf("cuda: bandwidth probe: %w", err)
			}
			if err := end.Synchronize(); err != nil {
				return fmt.Errorf("cuda: bandwidth probe: %w", err)
			}
			ms, err := start.Elapsed(end)
			if err != nil {
				return fmt.Errorf("cuda: bandwidth probe: %w", err)
			}
			if ms > 0 {
				best = max(best, 2*float64(bytes)/(ms/1e3))
			}
		}
		return nil
	})
	return best, err
}
