package runtime

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// freeMemoryAfterWeights is the memory the KV pool may take a fraction of:
// for cpu, the host's available memory less the weights in the form the
// cpu backend holds them (the file's element type, or 1.125 bytes a weight
// for q8 plus the embedding in the file's type); for cuda, the
// device's free memory once the weights are resident.
func freeMemoryAfterWeights(backend string, m *model.Model, q8 bool) (int64, error) {
	if backend == "cuda" {
		return cudaFreeMemory(m)
	}
	avail, err := memAvailable()
	if err != nil {
		return 0, err
	}
	c := &m.Config
	size := int64(m.Weights().Embed.DType.Size())
	weights := c.NumParameters() * size
	if q8 {
		// Every matrix at q8, plus the embedding rows in the file's type.
		weights = c.NumParameters()*kernels.Q8BlockBytes/kernels.Q8Block + int64(c.VocabSize)*int64(c.HiddenSize)*size
	}
	return max(0, avail-weights), nil
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
