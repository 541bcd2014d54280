// Package runtime assembles a worker's compute: it loads the model, sizes
// the KV pool from the memory budget (one code path for every backend, so
// the number the gateway's context-agreement check consumes is the number
// the pool really has; on the cpu backend the budget is bounded by the
// host's free memory and the process's cgroup memory limit, see
// MemoryPlan), builds the backend (converting the weights to
// Options.DType) and the engine.
package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// Options configure a Runtime.
type Options struct {
	// ModelDir is a Hugging Face layout directory or a GGUF model (a .gguf
	// file, or a directory holding one); see model.Load.
	ModelDir string
	// Backend is "cpu" (default) or "cuda" (only in builds with -tags cuda).
	Backend string
	// Threads is the number of compute threads; 0 means every core.
	Threads int
	// ComputeSpin is how long an idle compute thread spins before it
	// blocks (cpu backend; 0: the kernels' default, 2ms).
	ComputeSpin time.Duration
	// DType, when set (model.F32, F16 or BF16), converts the cpu
	// backend's matrices to it at load (cpu.ConvertWeights), as a bf16
	// checkpoint served as f16; "" keeps the file's element type.
	DType model.DType
	// Quantize holds the cpu backend's projection weights as Q8 (see
	// kernels.Matrix.QuantizeQ8); false keeps the file's element type.
	Quantize bool
	// BF16Dot multiplies the cpu backend's bf16 matrices in bf16
	// products (cpu.BF16Dot, worker.numerics bf16); false keeps exact
	// widening.
	BF16Dot bool
	// PageTokens is the KV page size in tokens.
	PageTokens int
	// KVBytes is the pool budget; 0 means KVFraction of the memory left
	// after the weights.
	KVBytes int64
	// KVFraction is used when KVBytes is 0, in (0, 1].
	KVFraction float64
	// MemoryHeadroom is left unplanned under a cgroup memory limit when
	// KVBytes is 0 (see MemoryPlan).
	MemoryHeadroom int64
	// ChunkTokens is the prefill chunk, MaxBatch the most sequences per
	// step.
	ChunkTokens, MaxBatch int
	// DecodingChunkTokens is the prefill chunk of a step that also decodes
	// (engine.Config.DecodingChunkTokens).
	DecodingChunkTokens int
	// ArrivalOrder gives the prefill chunk budget in admission order
	// rather than shortest first (engine.Config.ArrivalOrder).
	ArrivalOrder bool
	// Speculation configures the engine's n-gram speculative decoding.
	Speculation engine.Speculation
	// ZeroOnRelease and PoisonOnReserve harden the pool (I9).
	ZeroOnRelease, PoisonOnReserve bool
	// Storage, when set, provides the pool's slab for pages pages of
	// pageBytes bytes (the shm transfer backend maps a shared-memory
	// file). Nil allocates.
	Storage func(pages, pageBytes int) ([]byte, error)
	Logger  *slog.Logger
}

// Runtime is a loaded model with its KV pool and engine.
type Runtime struct {
	Model    *model.Model
	Pool     *kvpool.Pool
	Engine   *engine.Engine
	Capacity kvpool.Capacity
	// PageBytes is the size of one KV page.
	PageBytes int
	// Memory is how the pool's budget was chosen.
	Memory MemoryPlan
	// WeightsDType is the element type the backend computes with: "q8"
	// with Options.Quantize, else Options.DType or the file's, lower case
	// ("f32", "f16", "bf16").
	WeightsDType string
	// PrepareAdapter converts a LoRA adapter into the backend's form; nil
	// when the backend serves no adapters.
	PrepareAdapter func(*lora.Adapter) (engine.Adapter, error)

	backend interface{ Close() }
}

// ErrDType reports a weight conversion the backend cannot do.
var ErrDType = errors.New("runtime: unsupported weight dtype")

// ErrNoMemory reports a budget too small for a single page.
var ErrNoMemory = errors.New("runtime: KV memory budget holds no page")

// Open loads the model and builds pool, backend and engine.
func Open(opt Options) (*Runtime, error) {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Threads <= 0 {
		opt.Threads = goruntime.NumCPU()
	}
	if opt.Backend == "" {
		opt.Backend = "cpu"
	}
	m, err := model.Load(opt.ModelDir)
	if err != nil {
		return nil, err
	}
	if c := &m.Config; c.WindowClamped() {
		opt.Logger.Warn("sliding-window attention is not implemented: the context is clamped to the window, where full attention is the same",
			"model", m.Dir, "sliding_window", c.ContextLength(), "max_position_embeddings", c.MaxPositionEmbeddings)
	}
	r, err := open(m, opt)
	if err != nil {
		m.Close()
		return nil, err
	}
	return r, nil
}

func open(m *model.Model, opt Options) (_ *Runtime, err error) {
	spec := cpu.SpecFor(&m.Config)
	pageBytes := spec.PageBytes(opt.PageTokens)
	// The cuda backend is built before the pool: the device's free memory
	// must be measured with its weights resident (DESIGN I2), and its pages
	// live in device memory, so it makes the pool itself (poolMaker).
	var be closingBackend
	defer func() {
		if err != nil && be != nil {
			be.Close()
		}
	}()
	if opt.Backend == "cuda" {
		if opt.BF16Dot {
			return nil, fmt.Errorf("%w: bf16 products need the cpu backend", ErrDType)
		}
		if opt.DType != "" {
			return nil, fmt.Errorf("%w: the cuda backend computes with the file's element type or q8, not %s (use the cpu backend)",
				ErrDType, strings.ToLower(string(opt.DType)))
		}
		if be, err = newCUDABackend(opt, m); err != nil {
			return nil, err
		}
	}
	plan, err := planMemory(opt, m)
	if err != nil {
		return nil, err
	}
	budget := plan.BudgetBytes
	pages := kvpool.PagesForBudget(budget, pageBytes)
	if pages == 0 {
		return nil, fmt.Errorf("%w: budget %d bytes, page %d bytes (memory from %s: limit %d, available %d, headroom %d, weights %d bytes)",
			ErrNoMemory, budget, pageBytes, plan.Source, plan.LimitBytes, plan.AvailableBytes, plan.HeadroomBytes, plan.WeightsBytes)
	}
	cfg := kvpool.Config{Pages: pages, PageTokens: opt.PageTokens, PageBytes: pageBytes,
		ZeroOnRelease: opt.ZeroOnRelease, PoisonOnReserve: opt.PoisonOnReserve}
	if opt.Storage != nil {
		slab, err := opt.Storage(pages, pageBytes)
		if err != nil {
			return nil, fmt.Errorf("runtime: KV storage: %w", err)
		}
		cfg.Storage = slab
	}
	var pool *kvpool.Pool
	if pm, ok := be.(poolMaker); ok {
		pool, err = pm.NewPool(cfg)
	} else {
		pool, err = kvpool.New(cfg)
	}
	if err != nil {
		return nil, err
	}
	capacity := pool.Capacity()
	opt.Logger.Info(capacity.String(), "model", m.Dir, "backend", opt.Backend, "budget_bytes", budget,
		"memory_source", plan.Source, "memory_limit_bytes", plan.LimitBytes, "memory_available_bytes", plan.AvailableBytes,
		"memory_headroom_bytes", plan.HeadroomBytes, "weights_bytes", plan.WeightsBytes)

	if be == nil {
		if be, err = newBackend(opt, m, pool); err != nil {
			return nil, err
		}
	}
	eng, err := engine.New(engine.Config{
		PageTokens:          opt.PageTokens,
		ChunkTokens:         opt.ChunkTokens,
		DecodingChunkTokens: opt.DecodingChunkTokens,
		MaxBatch:            opt.MaxBatch,
		ArrivalOrder:        opt.ArrivalOrder,
		EOS:                 m.EOSTokenIDs(),
		VocabSize:           m.Config.VocabSize,
		Speculation:         opt.Speculation,
	}, be, pool, opt.Logger)
	if err != nil {
		return nil, err
	}
	rt := &Runtime{Model: m, Pool: pool, Engine: eng, Capacity: capacity, PageBytes: pageBytes, Memory: plan,
		WeightsDType: weightsDType(m, opt), backend: be}
	switch {
	case opt.BF16Dot && rt.WeightsDType != kernels.BF16Dot.String():
		opt.Logger.Warn("worker.numerics bf16 changes nothing: the weights are not bf16 (set worker.dtype bf16 to convert them)",
			"weights_dtype", rt.WeightsDType)
	case opt.BF16Dot && !kernels.BF16DotAccelerated():
		opt.Logger.Warn("this CPU lacks AVX512-BF16: bf16 products run in pure Go, many times slower than worker.numerics exact")
	}
	if ab, ok := be.(engine.AdapterBackend); ok {
		rt.PrepareAdapter = ab.PrepareAdapter
	}
	return rt, nil
}

// weightsDType names the element type the backend computes with (see
// Runtime.WeightsDType).
func weightsDType(m *model.Model, opt Options) string {
	switch {
	case opt.Quantize:
		return "q8"
	}
	dt := strings.ToLower(string(cmp.Or(opt.DType, m.Weights().Embed.DType)))
	if opt.BF16Dot && dt == "bf16" {
		return kernels.BF16Dot.String()
	}
	return dt
}

// closingBackend is an engine backend that holds resources.
type closingBackend interface {
	engine.Backend
	Close()
}

// poolMaker is a backend whose KV pages live in its own memory (cuda): it
// makes the pool for cfg, keeping the metadata in a kvpool.
type poolMaker interface {
	NewPool(cfg kvpool.Config) (*kvpool.Pool, error)
}

func newBackend(opt Options, m *model.Model, pool *kvpool.Pool) (closingBackend, error) {
	switch opt.Backend {
	case "cpu":
		b, err := cpu.FromModel(m, pool, cpu.Options{Threads: opt.Threads, Spin: opt.ComputeSpin,
			MaxBatchTokens: opt.ChunkTokens + opt.MaxBatch, PageTokens: opt.PageTokens, DType: opt.DType, Quantize: opt.Quantize,
			BF16Dot: opt.BF16Dot})
		if err != nil {
			return nil, err // not a nil *cpu.Backend in the interface: open would Close it
		}
		return b, nil
	default:
		return nil, fmt.Errorf("runtime: unknown backend %q (want cpu or cuda)", opt.Backend)
	}
}

// Run drives the engine until ctx is done.
func (r *Runtime) Run(ctx context.Context) error { return r.Engine.Run(ctx) }

// Close releases the backend and the model mapping. Call it after Run
// returned.
func (r *Runtime) Close() error {
	r.backend.Close()
	return r.Model.Close()
}
