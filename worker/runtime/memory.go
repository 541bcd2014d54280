package runtime

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/worker/model"
)

// freeMemoryAfterWeights is the memory the KV pool may take a fraction of:
// for cpu, the host's available memory less the weights in float32 (the
// form the cpu backend computes on); for cuda, the device's free memory
// once the weights are resident.
func freeMemoryAfterWeights(backend string, m *model.Model) (int64, error) {
	if backend == "cuda" {
		return cudaFreeMemory(m)
	}
	avail, err := memAvailable()
	if err != nil {
		return 0, err
	}
	return max(0, avail-m.Config.NumParameters()*4), nil
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
