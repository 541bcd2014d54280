package adapters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/model"
)

// fakeAdapter is a prepared adapter of the parsed adapter's size.
type fakeAdapter struct{ a *lora.Adapter }

func (f fakeAdapter) Hash() string { return f.a.Hash }
func (f fakeAdapter) Bytes() int64 { return f.a.Bytes }

func prepare(a *lora.Adapter) (engine.Adapter, error) { return fakeAdapter{a}, nil }

type files struct {
	ref         *controlpb.AdapterRef
	cfg, weight []byte
	bytes       int64
}

func base(t testing.TB) *model.Config {
	t.Helper()
	c, err := model.PresetConfig(model.PresetTiny)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// adapter is test adapter seed (rank 2 on q_proj: 2048 bytes on the tiny
// preset).
func adapter(t testing.TB, seed uint64) files {
	t.Helper()
	b := base(t)
	cj, w, err := lora.Random(b, lora.Config{Rank: 2, Alpha: 4, Targets: []lora.Module{lora.Q}}, 0.1, seed)
	if err != nil {
		t.Fatal(err)
	}
	a, err := lora.Parse(cj, w, b)
	if err != nil {
		t.Fatal(err)
	}
	return files{&controlpb.AdapterRef{Name: fmt.Sprintf("tiny:a%d", seed), Hash: a.Hash}, cj, w, a.Bytes}
}

func load(t *testing.T, m *Memory, f files, pin bool) error {
	t.Helper()
	n, err := m.Load(context.Background(), f.ref, f.cfg, f.weight, pin)
	if err == nil && n != f.bytes {
		t.Fatalf("Load returned %d bytes, want %d", n, f.bytes)
	}
	return err
}

func mustLoad(t *testing.T, m *Memory, f files, pin bool) {
	t.Helper()
	if err := load(t, m, f, pin); err != nil {
		t.Fatal(err)
	}
}

func loaded(m *Memory, fs ...files) []string {
	var hs []string
	for _, f := range fs {
		hs = append(hs, f.ref.Hash)
	}
	slices.Sort(hs)
	return hs
}

func checkLoaded(t *testing.T, m *Memory, want ...files) {
	t.Helper()
	s := m.Stats()
	if w := loaded(m, want...); !slices.Equal(s.Loaded, w) {
		t.Fatalf("loaded %v, want %v", s.Loaded, w)
	}
	var used int64
	for _, f := range want {
		used += f.bytes
	}
	if s.UsedBytes != used || s.CapacityBytes != m.Capacity() {
		t.Fatalf("used %d of %d, want %d of %d", s.UsedBytes, s.CapacityBytes, used, m.Capacity())
	}
}

// TestEvictsLeastRecentlyUsed: a load evicts the adapter used least
// recently (a request's Acquire counts as a use), one at a time.
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	a, b, c, d, e := adapter(t, 1), adapter(t, 2), adapter(t, 3), adapter(t, 4), adapter(t, 5)
	m := New(3*a.bytes, base(t), prepare)
	mustLoad(t, m, a, false)
	mustLoad(t, m, b, false)
	mustLoad(t, m, c, false)
	h, err := m.Acquire(a.ref.Hash)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	mustLoad(t, m, d, false) // b is the least recently used
	checkLoaded(t, m, a, c, d)
	mustLoad(t, m, e, false) // then c
	checkLoaded(t, m, a, d, e)
	got := collect(t, m)
	want := map[string]float64{"used": float64(3 * a.bytes), "capacity": float64(3 * a.bytes), "loads": 5, "evictions": 2}
	if !maps.Equal(got, want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
}

// TestPinnedAndInUseStay: pinned adapters and adapters a request holds
// are never evicted; a load that would need them is refused
// (RESOURCE_EXHAUSTED) and evicts nothing; once released or unpinned they
// go in LRU order again.
func TestPinnedAndInUseStay(t *testing.T) {
	a, b, c, d := adapter(t, 1), adapter(t, 2), adapter(t, 3), adapter(t, 4)
	m := New(2*a.bytes, base(t), prepare)
	mustLoad(t, m, a, true)
	mustLoad(t, m, b, false)
	h, err := m.Acquire(b.ref.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if h.Adapter().Hash() != b.ref.Hash {
		t.Fatalf("handle on %s, want %s", h.Adapter().Hash(), b.ref.Hash)
	}
	err = load(t, m, c, false)
	if !errors.Is(err, ErrFull) || Status(err).Code() != codes.ResourceExhausted {
		t.Fatalf("load with everything pinned or in use: %v, want ErrFull (RESOURCE_EXHAUSTED)", err)
	}
	checkLoaded(t, m, a, b)
	if s := m.Stats(); !slices.Equal(s.Pinned, []string{a.ref.Hash}) {
		t.Fatalf("pinned %v, want [%s]", s.Pinned, a.ref.Hash)
	}
	h.Release()
	h.Release() // idempotent: b's count must not go below zero
	mustLoad(t, m, c, false)
	checkLoaded(t, m, a, c)
	// Reloading a with pin false unpins it (and uses it): c is now the
	// least recently used.
	mustLoad(t, m, a, false)
	mustLoad(t, m, d, false)
	checkLoaded(t, m, a, d)
	if s := m.Stats(); len(s.Pinned) != 0 {
		t.Fatalf("pinned %v after unpinning", s.Pinned)
	}
	// Two handles: one release does not free it.
	h1, _ := m.Acquire(a.ref.Hash)
	h2, _ := m.Acquire(d.ref.Hash)
	h3, _ := m.Acquire(d.ref.Hash)
	h1.Release()
	h2.Release()
	mustLoad(t, m, b, false) // a goes, d is still held by h3
	checkLoaded(t, m, b, d)
	h3.Release()
}

// TestRefusals: too large, the wrong hash, a broken adapter, disabled.
func TestRefusals(t *testing.T) {
	a := adapter(t, 1)
	m := New(a.bytes-1, base(t), prepare)
	if err := load(t, m, a, false); !errors.Is(err, ErrFull) {
		t.Fatalf("an adapter over the capacity: %v, want ErrFull", err)
	}
	m = New(4*a.bytes, base(t), prepare)
	other := adapter(t, 2)
	wrong := files{other.ref, a.cfg, a.weight, a.bytes}
	if err := load(t, m, wrong, false); !errors.Is(err, ErrHashMismatch) || Status(err).Code() != codes.InvalidArgument {
		t.Fatalf("mismatched hash: %v, want ErrHashMismatch (INVALID_ARGUMENT)", err)
	}
	bad := []byte(`{"r":2,"lora_alpha":4,"target_modules":["q_proj"],"use_dora":true}`)
	broken := files{&controlpb.AdapterRef{Hash: lora.Hash(bad, a.weight)}, bad, a.weight, a.bytes}
	if err := load(t, m, broken, false); !errors.Is(err, lora.ErrInvalid) || Status(err).Code() != codes.InvalidArgument {
		t.Fatalf("a DoRA adapter: %v, want lora.ErrInvalid (INVALID_ARGUMENT)", err)
	}
	checkLoaded(t, m)
	off := New(0, base(t), prepare)
	if err := load(t, off, a, false); !errors.Is(err, ErrDisabled) {
		t.Fatalf("disabled memory: Load %v, want ErrDisabled", err)
	}
	if _, err := off.Acquire(a.ref.Hash); !errors.Is(err, ErrDisabled) || Status(err).Code() != codes.FailedPrecondition {
		t.Fatalf("disabled memory: Acquire %v, want ErrDisabled", err)
	}
	if New(1<<20, base(t), nil).Capacity() != 0 {
		t.Fatal("a backend without adapters has adapter memory")
	}
}

// TestNotLoaded: the error of an adapter not held is FAILED_PRECONDITION
// "adapter not loaded: <hash>", recognised from the gRPC status a client
// receives.
func TestNotLoaded(t *testing.T) {
	a := adapter(t, 1)
	m := New(4*a.bytes, base(t), prepare)
	_, err := m.Acquire(a.ref.Hash)
	if !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Acquire of an adapter not held: %v", err)
	}
	st := Status(fmt.Errorf("generate: %w", err))
	if st.Code() != codes.FailedPrecondition || st.Message() != "adapter not loaded: "+a.ref.Hash {
		t.Fatalf("status %v %q", st.Code(), st.Message())
	}
	if h, ok := IsNotLoaded(st.Err()); !ok || h != a.ref.Hash {
		t.Fatalf("IsNotLoaded(%v) = %q, %v", st.Err(), h, ok)
	}
	if h, ok := IsNotLoaded(err); !ok || h != a.ref.Hash {
		t.Fatalf("IsNotLoaded of the error itself = %q, %v", h, ok)
	}
	for _, e := range []error{
		nil,
		errors.New("adapter not loaded: " + a.ref.Hash),
		status.Error(codes.NotFound, "adapter not loaded: "+a.ref.Hash),
		status.Error(codes.FailedPrecondition, "adapter not loaded: xyz"),
		status.Error(codes.FailedPrecondition, ErrDisabled.Error()),
	} {
		if _, ok := IsNotLoaded(e); ok {
			t.Errorf("IsNotLoaded(%v) holds", e)
		}
	}
	mustLoad(t, m, a, false)
	h, err := m.Acquire(a.ref.Hash)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	var nilHandle *Handle
	nilHandle.Release()
}

// collect reads m's metrics: the memory gauge by state, and the loads and
// evictions counters.
func collect(t *testing.T, m *Memory) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 8)
	m.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for metric := range ch {
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			t.Fatal(err)
		}
		desc := metric.Desc().String()
		switch {
		case strings.Contains(desc, "warden_worker_adapter_memory_bytes"):
			out[d.GetLabel()[0].GetValue()] = d.GetGauge().GetValue()
		case strings.Contains(desc, "warden_worker_adapter_loads_total"):
			out["loads"] = d.GetCounter().GetValue()
		case strings.Contains(desc, "warden_worker_adapter_evictions_total"):
			out["evictions"] = d.GetCounter().GetValue()
		}
	}
	return out
}

// TestConcurrentUse: requests acquiring and releasing while loads evict
// leave the accounting exact: what is held adds up to used, and every
// adapter a handle was taken on stayed loaded until its release.
func TestConcurrentUse(t *testing.T) {
	fs := []files{adapter(t, 1), adapter(t, 2), adapter(t, 3), adapter(t, 4)}
	m := New(2*fs[0].bytes, base(t), prepare)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				f := fs[(g+i)%len(fs)]
				if _, err := m.Load(context.Background(), f.ref, f.cfg, f.weight, false); err != nil && !errors.Is(err, ErrFull) {
					t.Error(err)
					return
				}
				h, err := m.Acquire(f.ref.Hash)
				if err != nil {
					continue // evicted by another load before this acquire
				}
				if !slices.Contains(m.Stats().Loaded, f.ref.Hash) {
					t.Errorf("adapter %s evicted while held", f.ref.Hash)
				}
				h.Release()
			}
		})
	}
	wg.Wait()
	s := m.Stats()
	if s.UsedBytes != int64(len(s.Loaded))*fs[0].bytes || s.UsedBytes > m.Capacity() {
		t.Fatalf("used %d for %d adapters of %d bytes (capacity %d)", s.UsedBytes, len(s.Loaded), fs[0].bytes, m.Capacity())
	}
	// Nothing is held any more: two new loads fit by evicting.
	mustLoad(t, m, adapter(t, 5), false)
	mustLoad(t, m, adapter(t, 6), false)
}
