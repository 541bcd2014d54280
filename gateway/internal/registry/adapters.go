package registry

import (
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/internal/controlpb"
)

// AdapterMemory is a worker's LoRA adapter memory as its last heartbeat
// reported it (plus the adapters this gateway loaded there since).
type AdapterMemory struct {
	// Reported is false for a worker that reports no adapter memory: it
	// serves no adapters.
	Reported       bool
	Capacity, Used int64
	// Loaded are the content hashes of the adapters it holds; Pinned the
	// subset it never evicts for another. Read-only.
	Loaded, Pinned []string
}

func adapterMemoryOf(m *controlpb.AdapterMemory) AdapterMemory {
	if m == nil {
		return AdapterMemory{}
	}
	return AdapterMemory{Reported: true, Capacity: m.GetCapacityBytes(), Used: m.GetUsedBytes(), Loaded: m.GetLoaded(), Pinned: m.GetPinned()}
}

// Holds reports whether the adapter of content hash hash is loaded.
func (m AdapterMemory) Holds(hash string) bool { return slices.Contains(m.Loaded, hash) }

// Available estimates the bytes an adapter load may take: the capacity
// less what pinned adapters hold, since the worker evicts unpinned ones
// no request uses. The heartbeat gives no per-adapter size, so the
// pinned adapters' share of the used bytes is estimated by their count
// (exact when none or all are pinned).
func (m AdapterMemory) Available() int64 {
	if !m.Reported {
		return 0
	}
	pinned := m.Used
	if n := len(m.Loaded); n > 0 {
		pinned = m.Used * int64(min(len(m.Pinned), n)) / int64(n)
	}
	return max(m.Capacity-pinned, 0)
}

// AdapterLoaded records that the adapter of content hash hash, of size
// bytes, was loaded on the worker, until its next heartbeat says what it
// holds: routing prefers it at once.
func (w *Worker) AdapterLoaded(hash string, bytes int64) {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	if w.adapters == nil || slices.Contains(w.adapters.GetLoaded(), hash) {
		return
	}
	m := proto.Clone(w.adapters).(*controlpb.AdapterMemory) // candidates may hold the old one's slices
	m.Loaded = append(m.Loaded, hash)
	m.UsedBytes += bytes
	w.adapters = m
}
