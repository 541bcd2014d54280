package adapters

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/worker/model"
)

var shape = &model.Config{NumHiddenLayers: 2, HiddenSize: 32, IntermediateSize: 64, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8}

func newRegistry(t *testing.T, maxBytes int64) *Registry {
	t.Helper()
	s, err := memstore.New([]byte("adapters-test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acme", "beta", "gamma"} {
		if _, err := s.CreateTenant(t.Context(), tenant.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	return New(s, func(base string) (*model.Config, bool) { return shape, base == "m" }, maxBytes)
}

func upload(t *testing.T, name string, shared ...string) Upload {
	cfg, w, err := lora.Random(shape, lora.Config{Rank: 2, Alpha: 4, Targets: []lora.Module{lora.V}}, 0.1, 1)
	if err != nil {
		t.Fatal(err)
	}
	return Upload{Base: "m", Name: name, Owner: "acme", SharedWith: shared, ConfigJSON: cfg, Weights: w}
}

// TestResolve: the owner and the tenants shared with resolve the adapter;
// anyone else, and a missing name, get ErrNotFound alike.
func TestResolve(t *testing.T) {
	r := newRegistry(t, 1<<20)
	a, err := r.Register(t.Context(), upload(t, "ad", "beta"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "m:ad" || a.Rank != 2 || a.Bytes != 2*4*(2*32+16*2) || len(a.Targets) != 1 || a.Targets[0] != "v_proj" {
		t.Fatalf("registered %+v", a)
	}
	for _, id := range []string{"acme", "beta"} {
		if got, err := r.Resolve(t.Context(), id, "m:ad"); err != nil || got.Hash != a.Hash {
			t.Fatalf("Resolve for %s = %+v, %v", id, got, err)
		}
	}
	for _, c := range [][2]string{{"gamma", "m:ad"}, {"acme", "m:none"}, {"acme", "bad name"}} {
		if _, err := r.Resolve(t.Context(), c[0], c[1]); !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%s, %q) = %v, want ErrNotFound", c[0], c[1], err)
		}
	}
	if l, err := r.Usable(t.Context(), "gamma"); err != nil || len(l) != 0 {
		t.Fatalf("Usable for gamma = %+v, %v", l, err)
	}
	if l, err := r.Usable(t.Context(), "beta"); err != nil || len(l) != 1 || l[0].Name != "m:ad" {
		t.Fatalf("Usable for beta = %+v, %v", l, err)
	}
}

// TestRegisterRefuses: too large, unknown base, invalid files, no name.
func TestRegisterRefuses(t *testing.T) {
	r := newRegistry(t, 1<<20)
	small := newRegistry(t, 100)
	if _, err := small.Register(t.Context(), upload(t, "ad")); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over max bytes: %v", err)
	}
	u := upload(t, "ad")
	u.Base = "other"
	if _, err := r.Register(t.Context(), u); !errors.Is(err, ErrBaseUnknown) {
		t.Errorf("unknown base: %v", err)
	}
	u = upload(t, "ad")
	u.Weights = u.Weights[:10]
	if _, err := r.Register(t.Context(), u); !errors.Is(err, lora.ErrInvalid) {
		t.Errorf("truncated weights: %v", err)
	}
	if _, err := r.Register(t.Context(), upload(t, "")); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("no name: %v", err)
	}
}

// TestRetry: only the worker's "adapter not loaded" refusal of the
// request's own adapter triggers a push (here failing: the registry has
// no files of that hash); anything else is returned as it is.
func TestRetry(t *testing.T) {
	r := newRegistry(t, 1<<20)
	a := tenant.Adapter{Name: "m:ad", Hash: strings.Repeat("c", 64)}
	noLoad := func(int64) { t.Error("loaded called") }
	for _, refusal := range []error{
		controlpb.AdapterNotLoaded(strings.Repeat("e", 64)).Err(),
		status.Error(codes.FailedPrecondition, "draining"),
		status.Error(codes.NotFound, "adapter not loaded: "+a.Hash),
	} {
		calls := 0
		err := r.Retry(context.Background(), nil, &a, func() error { calls++; return refusal }, noLoad)
		if err != refusal || calls != 1 {
			t.Errorf("Retry on %v: %v after %d calls, want the refusal after 1", refusal, err, calls)
		}
	}
	calls := 0
	err := r.Retry(context.Background(), nil, &a, func() error { calls++; return controlpb.AdapterNotLoaded(a.Hash).Err() }, noLoad)
	if !errors.Is(err, tenant.ErrNotFound) || !strings.Contains(err.Error(), "files of m:ad") || calls != 1 {
		t.Fatalf("Retry on its own adapter's refusal: %v after %d calls, want the push's failure", err, calls)
	}
	calls = 0
	if err := r.Retry(context.Background(), nil, nil, func() error { calls++; return nil }, nil); err != nil || calls != 1 {
		t.Fatalf("Retry without an adapter: %v after %d calls", err, calls)
	}
}
