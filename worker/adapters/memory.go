package adapters

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/model"
)

// Errors of the adapter memory; Status maps them to gRPC codes.
var (
	// ErrDisabled: the worker has no adapter memory (worker.adapters.memory
	// is 0) or its backend does not serve adapters.
	ErrDisabled = errors.New("adapters: this worker serves no LoRA adapters (worker.adapters.memory is 0, or its compute backend does not compute them: cuda)")
	// ErrNotLoaded: a request names an adapter the worker does not hold.
	// Its message, "adapter not loaded", prefixes the gRPC status message
	// the gateway recognises (NotLoadedError, IsNotLoaded).
	ErrNotLoaded = errors.New("adapter not loaded")
	// ErrFull: pinned adapters and adapters in use leave no room for a
	// load.
	ErrFull = errors.New("adapters: adapter memory full")
	// ErrHashMismatch: the files' content hash is not the one the load
	// names.
	ErrHashMismatch = errors.New("adapters: adapter content hash mismatch")
)

// Prepare converts a parsed adapter into the compute backend's form
// (engine.AdapterBackend.PrepareAdapter).
type Prepare func(*lora.Adapter) (engine.Adapter, error)

// Memory is the worker's adapter memory. It is safe for concurrent use.
type Memory struct {
	capacity int64
	base     *model.Config
	prepare  Prepare

	mu      sync.Mutex
	entries map[string]*entry
	used    int64
	clock   uint64 // advances on every use: entry.used orders the LRU
	loads   uint64
	evicted uint64
}

type entry struct {
	ad       engine.Adapter
	bytes    int64
	pinned   bool
	holders  int    // handles not yet released
	lastUsed uint64 // clock at the last load or acquire
}

// New returns an adapter memory of capacity bytes for adapters of the
// model base, prepared with prepare. A capacity of 0 or a nil prepare
// (a backend without adapters) disables it: every load and acquire fails
// with ErrDisabled.
func New(capacity int64, base *model.Config, prepare Prepare) *Memory {
	if prepare == nil {
		capacity = 0
	}
	return &Memory{capacity: max(0, capacity), base: base, prepare: prepare, entries: map[string]*entry{}}
}

// Capacity is the memory's budget in bytes (0: disabled).
func (m *Memory) Capacity() int64 { return m.capacity }

// Load parses an adapter's files (adapter_config.json and
// adapter_model.safetensors) against the served model, checks that their
// content hash is ref's, prepares it for the backend and keeps it,
// evicting unpinned adapters no request holds, least recently used first,
// when the budget needs room. pin keeps it from eviction until a later
// Load of it with pin false. Loading an adapter already held only
// updates its pin. It returns the adapter's size in the memory.
func (m *Memory) Load(ctx context.Context, ref *controlpb.AdapterRef, configJSON, weights []byte, pin bool) (int64, error) {
	if m.capacity == 0 {
		return 0, ErrDisabled
	}
	hash := ref.GetHash()
	if !lora.ValidHash(hash) {
		return 0, fmt.Errorf("%w: %q is not a content hash", lora.ErrInvalid, hash)
	}
	if got := lora.Hash(configJSON, weights); got != hash {
		return 0, fmt.Errorf("%w: the files hash to %s, the load names %s", ErrHashMismatch, got, hash)
	}
	if n, ok := m.touch(hash, pin); ok {
		return n, nil
	}
	// Parse and prepare outside the lock: they take time in proportion to
	// the adapter, and requests acquire meanwhile.
	a, err := lora.Parse(configJSON, weights, m.base)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ad, err := m.prepare(a)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", lora.ErrInvalid, err)
	}
	return m.insert(hash, ad, pin)
}

// touch updates the pin and recency of an adapter already held.
func (m *Memory) touch(hash string, pin bool) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[hash]
	if e == nil {
		return 0, false
	}
	e.pinned = pin
	m.clock++
	e.lastUsed = m.clock
	return e.bytes, true
}

// insert adds a prepared adapter, making room first.
func (m *Memory) insert(hash string, ad engine.Adapter, pin bool) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[hash]; e != nil { // a concurrent load won
		e.pinned = pin
		return e.bytes, nil
	}
	need := ad.Bytes()
	if need > m.capacity {
		return 0, fmt.Errorf("%w: the adapter takes %d bytes, the memory holds %d (worker.adapters.memory)", ErrFull, need, m.capacity)
	}
	if free := m.capacity - m.used; free < need {
		// The evictable adapters, least recently used first, as many as
		// the room takes; none is evicted when all of them would not do.
		var victims []string
		for h, e := range m.entries {
			if !e.pinned && e.holders == 0 {
				victims = append(victims, h)
			}
		}
		slices.SortFunc(victims, func(a, b string) int { return cmp.Compare(m.entries[a].lastUsed, m.entries[b].lastUsed) })
		n := 0
		for ; n < len(victims) && free < need; n++ {
			free += m.entries[victims[n]].bytes
		}
		if free < need {
			return 0, fmt.Errorf("%w: the adapter takes %d bytes; %d of %d are held by pinned adapters and adapters in use",
				ErrFull, need, m.capacity-free, m.capacity)
		}
		for _, h := range victims[:n] {
			m.used -= m.entries[h].bytes
			delete(m.entries, h)
			m.evicted++
		}
	}
	m.clock++
	m.entries[hash] = &entry{ad: ad, bytes: need, pinned: pin, lastUsed: m.clock}
	m.used += need
	m.loads++
	return need, nil
}

// Handle keeps an adapter from eviction while a request runs under it.
type Handle struct {
	m    *Memory
	hash string
	ad   engine.Adapter
	once sync.Once
}

// Adapter is the prepared adapter, for engine.Request.Adapter; nil for a
// nil Handle (the base model).
func (h *Handle) Adapter() engine.Adapter {
	if h == nil {
		return nil
	}
	return h.ad
}

// Release lets the adapter be evicted again as far as this handle is
// concerned. It is idempotent; a nil Handle (the base model) is a no-op.
func (h *Handle) Release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		if e := h.m.entries[h.hash]; e != nil {
			e.holders--
		}
	})
}

// Acquire returns a handle on the adapter of content hash hash, which
// keeps it loaded until Release. It fails with a *NotLoadedError (Is
// ErrNotLoaded) when the memory does not hold it, ErrDisabled when the
// worker serves no adapters.
func (m *Memory) Acquire(hash string) (*Handle, error) {
	if m.capacity == 0 {
		return nil, ErrDisabled
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[hash]
	if e == nil {
		return nil, &NotLoadedError{Hash: hash}
	}
	e.holders++
	m.clock++
	e.lastUsed = m.clock
	return &Handle{m: m, hash: hash, ad: e.ad}, nil
}

// Stats reports the memory for heartbeats: capacity, bytes used, the
// hashes held and those pinned, sorted.
func (m *Memory) Stats() *controlpb.AdapterMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &controlpb.AdapterMemory{CapacityBytes: m.capacity, UsedBytes: m.used}
	for h, e := range m.entries {
		s.Loaded = append(s.Loaded, h)
		if e.pinned {
			s.Pinned = append(s.Pinned, h)
		}
	}
	slices.Sort(s.Loaded)
	slices.Sort(s.Pinned)
	return s
}

// NotLoadedError is the failure of a request naming an adapter the
// worker does not hold. Its gRPC status (Status) is FAILED_PRECONDITION
// with the message "adapter not loaded: <hash>".
type NotLoadedError struct {
	Hash string
}

func (e *NotLoadedError) Error() string { return e.GRPCStatus().Message() }

// Is makes errors.Is(err, ErrNotLoaded) hold.
func (e *NotLoadedError) Is(target error) bool { return target == ErrNotLoaded }

// GRPCStatus is the error's gRPC status: FAILED_PRECONDITION with the
// message IsNotLoaded recognises (a handler returns Status(err).Err(), as
// a wrapping error's message would prefix it).
func (e *NotLoadedError) GRPCStatus() *status.Status {
	return controlpb.AdapterNotLoaded(e.Hash)
}

// IsNotLoaded reports whether err (a gRPC status error from a worker, or
// a NotLoadedError) says the worker does not hold an adapter, and which:
// FAILED_PRECONDITION with the message "adapter not loaded: <hash>".
func IsNotLoaded(err error) (hash string, ok bool) {
	var nl *NotLoadedError
	if errors.As(err, &nl) {
		return nl.Hash, true
	}
	h, found := controlpb.IsAdapterNotLoaded(err)
	if !found || !lora.ValidHash(h) {
		return "", false
	}
	return h, true
}

// Status maps the memory's errors to gRPC statuses: not loaded
// FAILED_PRECONDITION, full RESOURCE_EXHAUSTED, a bad adapter or hash
// INVALID_ARGUMENT, disabled FAILED_PRECONDITION (its own message); nil
// for another error.
func Status(err error) *status.Status {
	var nl *NotLoadedError
	switch {
	case errors.As(err, &nl):
		return nl.GRPCStatus()
	case errors.Is(err, ErrFull):
		return status.New(codes.ResourceExhausted, err.Error())
	case errors.Is(err, ErrHashMismatch), errors.Is(err, lora.ErrInvalid), errors.Is(err, ErrTooLarge), errors.Is(err, ErrStream):
		return status.New(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrDisabled):
		return status.New(codes.FailedPrecondition, err.Error())
	}
	return nil
}

// Describe implements prometheus.Collector.
func (m *Memory) Describe(ch chan<- *prometheus.Desc) {
	ch <- memoryDesc
	ch <- loadsDesc
	ch <- evictionsDesc
}

// Collect implements prometheus.Collector.
func (m *Memory) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	used, loads, evicted := m.used, m.loads, m.evicted
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(used), "used")
	ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(m.capacity), "capacity")
	ch <- prometheus.MustNewConstMetric(loadsDesc, prometheus.CounterValue, float64(loads))
	ch <- prometheus.MustNewConstMetric(evictionsDesc, prometheus.CounterValue, float64(evicted))
}

var (
	memoryDesc = prometheus.NewDesc("warden_worker_adapter_memory_bytes",
		"The worker's LoRA adapter memory, by state: used (adapters held) and capacity (worker.adapters.memory).", []string{"state"}, nil)
	loadsDesc = prometheus.NewDesc("warden_worker_adapter_loads_total",
		"LoRA adapters loaded into the adapter memory (LoadAdapter of an adapter not held).", nil, nil)
	evictionsDesc = prometheus.NewDesc("warden_worker_adapter_evictions_total",
		"LoRA adapters evicted from the adapter memory to make room for another (unpinned, unused, least recently used first).", nil, nil)
)
