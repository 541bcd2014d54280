package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
	"github.com/warden-ai/warden/worker/runtime/internal/cgroupmem"
)

// Where a KV pool's budget came from (MemoryPlan.Source).
const (
	// SourceConfigured: Options.KVBytes (worker.kv.memory_bytes).
	SourceConfigured = "configured"
	// SourceMeminfo: the host's MemAvailable (/proc/meminfo), no smaller
	// cgroup limit applying.
	SourceMeminfo = "meminfo"
	// SourceCUDA: the device's free memory with the weights resident.
	SourceCUDA = "cuda"
	// SourceCgroupV2 and SourceCgroupV1: the process's cgroup memory
	// limit (the tightest along its hierarchy).
	SourceCgroupV2 = string(cgroupmem.V2)
	SourceCgroupV1 = string(cgroupmem.V1)
)

// MemoryPlan is how the KV pool's budget was chosen.
type MemoryPlan struct {
	// Source is one of the Source constants.
	Source string
	// LimitBytes is the bound the plan used: the cgroup's memory limit,
	// the host's MemAvailable, the device's free memory; 0 when
	// configured.
	LimitBytes int64
	// AvailableBytes is the memory the weights and the pool had to fit
	// in: for a cgroup, limit − usage − HeadroomBytes (when below the
	// host's MemAvailable).
	AvailableBytes int64
	// HeadroomBytes is what was left for the process under a cgroup limit
	// (Options.MemoryHeadroom); 0 otherwise.
	HeadroomBytes int64
	// WeightsBytes is the weights as the backend holds them, subtracted
	// from AvailableBytes (0 for cuda, whose free memory is measured with
	// them resident).
	WeightsBytes int64
	// BudgetBytes is the pool's budget: Options.KVFraction of what is
	// left after the weights, or Options.KVBytes.
	BudgetBytes int64
}

// planMemory chooses the KV pool's budget (see MemoryPlan).
func planMemory(opt Options, m *model.Model) (MemoryPlan, error) {
	if opt.KVBytes > 0 {
		return MemoryPlan{Source: SourceConfigured, BudgetBytes: opt.KVBytes}, nil
	}
	var p MemoryPlan
	if opt.Backend == "cuda" {
		free, err := cudaFreeMemory(m)
		if err != nil {
			return MemoryPlan{}, err
		}
		p = MemoryPlan{Source: SourceCUDA, LimitBytes: free, AvailableBytes: free}
	} else {
		avail, err := memAvailable()
		if err != nil {
			return MemoryPlan{}, err
		}
		lim, err := cgroupmem.Self()
		if p, err = hostMemory(avail, lim, err, opt.MemoryHeadroom); err != nil {
			return MemoryPlan{}, err
		}
		p.WeightsBytes = weightsBytes(m, opt)
	}
	p.BudgetBytes = int64(float64(max(0, p.AvailableBytes-p.WeightsBytes)) * opt.KVFraction)
	return p, nil
}

// hostMemory bounds the memory available to the process: the host's
// MemAvailable (avail), or the cgroup limit's room less headroom when
// that is smaller. limErr is cgroupmem.Self's error: ErrNoLimit means no
// cgroup limit; any other is returned.
func hostMemory(avail int64, lim cgroupmem.Limit, limErr error, headroom int64) (MemoryPlan, error) {
	host := MemoryPlan{Source: SourceMeminfo, LimitBytes: avail, AvailableBytes: avail}
	switch {
	case errors.Is(limErr, cgroupmem.ErrNoLimit):
		return host, nil
	case limErr != nil:
		return MemoryPlan{}, fmt.Errorf("runtime: cannot read the cgroup memory limit to size the KV pool (set worker.kv.memory_bytes): %w", limErr)
	}
	room := max(0, lim.Available()-headroom)
	if room >= avail {
		return host, nil
	}
	return MemoryPlan{Source: string(lim.Version), LimitBytes: lim.Bytes, AvailableBytes: room, HeadroomBytes: headroom}, nil
}

// weightsBytes is the weights in the form the cpu backend holds them:
// the file's element type or Options.DType, or 1.125 bytes a weight for
// q8 plus the embedding in that type.
func weightsBytes(m *model.Model, opt Options) int64 {
	c := &m.Config
	size := int64(m.Weights().Embed.DType.Size())
	if opt.DType != "" {
		size = int64(opt.DType.Size())
	}
	if opt.Quantize {
		// Every matrix at q8, plus the embedding rows in the file's type.
		return c.NumParameters()*kernels.Q8BlockBytes/kernels.Q8Block + int64(c.VocabSize)*int64(c.HiddenSize)*size
	}
	return c.NumParameters() * size
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("runtime: cannot size the KV pool from free memory (set worker.kv.memory_bytes): %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("runtime: /proc/meminfo: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("runtime: /proc/meminfo has no MemAvailable (set worker.kv.memory_bytes)")
}
