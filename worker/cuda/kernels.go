//go:build cuda

package cuda

import (
	"embed"
	"fmt"
	"math"
	"path"

	"gorgonia.org/cu"
)

// ptxFiles holds kernels/*.cu compiled by scripts/gen-ptx.sh, one file per
// source and target: ptx/NAME.sm_80.ptx and ptx/NAME.sm_90.ptx.
//
//go:embed ptx/*.ptx
var ptxFiles embed.FS

// ptxSources are the kernel sources (kernels/NAME.cu) the backend loads.
var ptxSources = [...]string{"linear", "attention", "ops"}

// wtype is a weight matrix element type on the device.
type wtype int

const (
	wF32 wtype = iota
	wF16
	wBF16
	// wQ8 is block-quantized int8 (kernels.Q8's layout, see q8Block):
	// linear layers only, the embedding keeps a float type.
	wQ8
	numWTypes
	// numFloatTypes counts the types before wQ8, those of the embedding.
	numFloatTypes = wQ8
)

// suffix is the kernel name suffix of the type.
func (t wtype) suffix() string { return [...]string{"f32", "f16", "bf16", "q8"}[t] }

// Block sizes the kernels are written for.
const (
	linearThreads    = 256 // LINEAR_THREADS
	attentionThreads = 128 // ATT_THREADS
	maxHeadDim       = 256 // ATT_MAX_HEAD_DIM
	rowThreads       = 256
	maxGridY         = 65535
)

// kernels are the loaded functions. Their launch methods enqueue on a
// stream and must run inside device.do.
type kernels struct {
	modules []cu.Module
	// linear[t][0] handles one activation row per warp, [t][1] eight.
	linear [numWTypes][2]cu.Function
	embed  [numFloatTypes]cu.Function

	rmsnorm, qkvPrep, ropeKV, attention, argmax, applyTags, fillPages, swigluFn cu.Function
}

// loadKernels loads the PTX for arch ("sm_80" or "sm_90"); the driver
// compiles it for the device. Call inside do.
func loadKernels(arch string) (*kernels, error) {
	k := &kernels{}
	for _, src := range ptxSources {
		name := path.Join("ptx", src+"."+arch+".ptx")
		ptx, err := ptxFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("cuda: embedded %s: %w", name, err)
		}
		m, err := cu.LoadData(string(ptx))
		if err != nil {
			k.unload()
			return nil, fmt.Errorf("cuda: load %s: %w", name, err)
		}
		k.modules = append(k.modules, m)
	}
	var missing error
	get := func(name string) cu.Function {
		for _, m := range k.modules {
			if f, err := m.Function(name); err == nil {
				return f
			}
		}
		if missing == nil {
			missing = fmt.Errorf("cuda: kernel %s not found in the embedded PTX (run scripts/gen-ptx.sh)", name)
		}
		return cu.Function{}
	}
	for t := range numWTypes {
		k.linear[t][0] = get("linear_" + t.suffix() + "_r1")
		k.linear[t][1] = get("linear_" + t.suffix() + "_r8")
	}
	for t := range numFloatTypes {
		k.embed[t] = get("embed_" + t.suffix())
	}
	k.rmsnorm = get("rmsnorm")
	k.qkvPrep = get("qkv_prep")
	k.ropeKV = get("rope_kv")
	k.attention = get("attention")
	k.argmax = get("argmax")
	k.applyTags = get("apply_tags")
	k.fillPages = get("fill_pages")
	k.swigluFn = get("swiglu")
	if missing != nil {
		k.unload()
		return nil, missing
	}
	return k, nil
}

// unload unloads the modules. Call inside do.
func (k *kernels) unload() {
	for _, m := range k.modules {
		m.Unload()
	}
	k.modules = nil
}

func ptr(p cu.DevicePtr) uint64 { return uint64(p) }
func i64(n int) uint64          { return uint64(int64(n)) }

// linearOut computes y = x·Wᵀ for rows activation rows of k floats and n
// weight rows (mode modeStore), adds it to y (modeAdd), or, in
// modeSwiGLU, y = silu(x·Wᵀ) ⊙ (x·W2ᵀ). y has n columns. W and W2 are of
// type t; q8 needs k to be a multiple of q8Block.
func (k *kernels) linearOut(s cu.Stream, t wtype, y, x, w, w2 cu.DevicePtr, rows, n, kDim, mode int) error {
	if t == wQ8 && kDim%q8Block != 0 {
		return fmt.Errorf("cuda: q8 linear layer of %d inputs (not whole %d-weight blocks)", kDim, q8Block)
	}
	fn, perWarp := k.linear[t][1], 8
	if rows == 1 {
		fn, perWarp = k.linear[t][0], 1
	}
	pairs := n
	if mode != modeSwiGLU {
		pairs = ceilDiv(n, 2)
	}
	gy := ceilDiv(pairs, linearThreads/32)
	if gy > maxGridY {
		return fmt.Errorf("cuda: linear layer of %d outputs exceeds the kernel's grid", n)
	}
	return launch(fn, dim3{ceilDiv(rows, perWarp), gy, 1}, dim3{linearThreads, 1, 1}, s,
		ptr(y), ptr(x), ptr(w), ptr(w2), i64(rows), i64(n), i64(kDim), i64(mode))
}

// swiglu computes y = silu(g) ⊙ u over n floats, rounding as the linear
// kernel's modeSwiGLU epilogue does.
func (k *kernels) swiglu(s cu.Stream, y, g, u cu.DevicePtr, n int) error {
	return launch(k.swigluFn, dim3{ceilDiv(n, rowThreads), 1, 1}, dim3{rowThreads, 1, 1}, s, ptr(y), ptr(g), ptr(u), i64(n))
}

// embedRows gathers rows embedding rows of hidden elements for tokens.
func (k *kernels) embedRows(s cu.Stream, t wtype, x, table, tokens cu.DevicePtr, rows, hidden int) error {
	return launch(k.embed[t], dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, s,
		ptr(x), ptr(table), ptr(tokens), i64(hidden))
}

// rmsNorm normalises rows rows of n floats; srcRows, when non-zero, is a
// device int32 list of the source row of each output row.
func (k *kernels) rmsNorm(s cu.Stream, out, x, w, srcRows cu.DevicePtr, rows, n int, eps float64) error {
	return launch(k.rmsnorm, dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, s,
		ptr(out), ptr(x), ptr(w), ptr(srcRows), i64(n), math.Float64bits(eps))
}

// qkvPrepRows adds the q/k/v biases (bias non-zero) and RMS-normalises
// every query and key head (qNorm and kNorm non-zero) of rows rows of qkv,
// which hold heads+2·kvHeads head slices each.
func (k *kernels) qkvPrepRows(s cu.Stream, qkv, bias, qNorm, kNorm, geom cu.DevicePtr, rows, slices int) error {
	if slices > maxGridY {
		return fmt.Errorf("cuda: %d attention head slices exceed the kernel's grid", slices)
	}
	return launch(k.qkvPrep, dim3{rows, slices, 1}, dim3{attentionThreads, 1, 1}, s,
		ptr(qkv), ptr(bias), ptr(qNorm), ptr(kNorm), ptr(geom))
}

// stepArgs are the per-step device arrays the KV and attention kernels
// read (see stepMeta).
type stepArgs struct {
	rowChunk, rowPos, chunks, tables cu.DevicePtr
	tags, errRec, geom               cu.DevicePtr
}

// ropeKV rotates q and k of rows rows of qkv and writes k and v into the
// KV pages of layer.
func (k *kernels) ropeKVRows(s cu.Stream, a stepArgs, qkv, kv, cos, sin cu.DevicePtr, rows, layer int) error {
	return launch(k.ropeKV, dim3{rows, 1, 1}, dim3{attentionThreads, 1, 1}, s,
		ptr(qkv), ptr(kv), ptr(a.rowChunk), ptr(a.rowPos), ptr(a.chunks), ptr(a.tables),
		ptr(a.tags), ptr(a.errRec), ptr(cos), ptr(sin), ptr(a.geom), i64(layer))
}

// attend runs paged attention of layer for rows rows and heads heads into
// out.
func (k *kernels) attend(s cu.Stream, a stepArgs, out, qkv, kv cu.DevicePtr, rows, heads, layer int) error {
	if heads > maxGridY {
		return fmt.Errorf("cuda: %d attention heads exceed the kernel's grid", heads)
	}
	return launch(k.attention, dim3{rows, heads, 1}, dim3{attentionThreads, 1, 1}, s,
		ptr(out), ptr(qkv), ptr(kv), ptr(a.rowChunk), ptr(a.rowPos), ptr(a.chunks), ptr(a.tables),
		ptr(a.tags), ptr(a.errRec), ptr(a.geom), i64(layer))
}

// argmaxRows writes the greedy token of each of rows rows of n logits.
func (k *kernels) argmaxRows(s cu.Stream, out, x cu.DevicePtr, rows, n int) error {
	return launch(k.argmax, dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, s, ptr(out), ptr(x), i64(n))
}

// setTags writes n tag updates (ids and devTags) into the device tags.
func (k *kernels) setTags(s cu.Stream, tags, ids, updates cu.DevicePtr, n int) error {
	return launch(k.applyTags, dim3{ceilDiv(n, rowThreads), 1, 1}, dim3{rowThreads, 1, 1}, s,
		ptr(tags), ptr(ids), ptr(updates), i64(n))
}

// fill sets every word of n pages (ids, a device int32 list) to word.
func (k *kernels) fill(s cu.Stream, kv, ids cu.DevicePtr, n, pageFloats int, word uint32) error {
	for done := 0; done < n; done += maxGridY {
		m := min(n-done, maxGridY)
		err := launch(k.fillPages, dim3{min(ceilDiv(pageFloats, rowThreads), 1024), m, 1}, dim3{rowThreads, 1, 1}, s,
			ptr(kv), ptr(ids+cu.DevicePtr(4*done)), i64(pageFloats), uint64(word))
		if err != nil {
			return err
		}
	}
	return nil
}
