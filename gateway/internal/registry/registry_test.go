package registry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type harness struct {
	*Registry
	clock   *clock
	mu      sync.Mutex
	changes []Change
	dials   []string
}

func newHarness(t *testing.T, accept func(*controlpb.WorkerInfo) error) *harness {
	t.Helper()
	h := &harness{clock: &clock{now: time.Unix(1700000000, 0)}}
	h.Registry = New(Config{
		HeartbeatTimeout: 6 * time.Second,
		Now:              h.clock.Now,
		Dial: func(addr string) (*grpc.ClientConn, error) {
			h.mu.Lock()
			h.dials = append(h.dials, addr)
			h.mu.Unlock()
			// Lazy: nothing listens there and nothing is dialled.
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		},
		Accept: func(_ context.Context, info *controlpb.WorkerInfo, _ controlpb.WorkerClient) error {
			if accept != nil {
				return accept(info)
			}
			return nil
		},
		OnChange: func(c Change) {
			h.mu.Lock()
			h.changes = append(h.changes, c)
			h.mu.Unlock()
		},
	})
	t.Cleanup(h.Close)
	return h
}

func (h *harness) kinds() []ChangeKind {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ChangeKind, len(h.changes))
	for i, c := range h.changes {
		out[i] = c.Kind
	}
	return out
}

func pool(total, free int64) *controlpb.PoolStats {
	return &controlpb.PoolStats{TotalPages: total, FreePages: free, ReservedPages: total - free, PageTokens: 16, CapacityTokens: total * 16}
}

func info(id string, role controlpb.Role, host, backend string) *controlpb.WorkerInfo {
	return &controlpb.WorkerInfo{WorkerId: id, Role: role, Model: "tiny", ControlAddr: "127.0.0.1:1",
		TransferAddr: "127.0.0.1:2", TransferBackend: backend, HostId: host, TokenizerSha256: "abc"}
}

func (h *harness) register(t *testing.T, i *controlpb.WorkerInfo, p *controlpb.PoolStats) {
	t.Helper()
	resp, err := h.Register(context.Background(), &controlpb.RegisterRequest{Worker: i, Pool: p})
	if err != nil {
		t.Fatalf("Register(%s): %v", i.WorkerId, err)
	}
	if resp.HeartbeatIntervalMs != 2000 {
		t.Errorf("heartbeat interval %d ms, want a third of the timeout", resp.HeartbeatIntervalMs)
	}
}

func (h *harness) heartbeat(t *testing.T, id string, p *controlpb.PoolStats) bool {
	t.Helper()
	resp, err := h.Heartbeat(context.Background(), &controlpb.HeartbeatRequest{WorkerId: id, Pool: p})
	if err != nil {
		t.Fatalf("Heartbeat(%s): %v", id, err)
	}
	return resp.Reregister
}

func TestRegisterValidates(t *testing.T) {
	h := newHarness(t, func(i *controlpb.WorkerInfo) error {
		if i.WorkerId == "refused" {
			return errors.New("tokenizer differs")
		}
		return nil
	})
	good := info("w1", controlpb.Role_ROLE_BOTH, "h", "tcp")
	bad := []struct {
		name string
		info *controlpb.WorkerInfo
		pool *controlpb.PoolStats
		code codes.Code
	}{
		{"no id", info("", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(10, 10), codes.InvalidArgument},
		{"no role", info("w", controlpb.Role_ROLE_UNSPECIFIED, "h", "tcp"), pool(10, 10), codes.InvalidArgument},
		{"no pool", good, nil, codes.InvalidArgument},
		{"capacity lies", good, &controlpb.PoolStats{TotalPages: 10, FreePages: 10, PageTokens: 16, CapacityTokens: 1 << 30}, codes.InvalidArgument},
		{"pages exceed total", good, &controlpb.PoolStats{TotalPages: 10, FreePages: 10, InUsePages: 1, PageTokens: 16, CapacityTokens: 160}, codes.InvalidArgument},
		{"decode without transfer address", func() *controlpb.WorkerInfo {
			i := info("d", controlpb.Role_ROLE_DECODE, "h", "tcp")
			i.TransferAddr = ""
			return i
		}(), pool(10, 10), codes.InvalidArgument},
		{"refused by Accept", info("refused", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(10, 10), codes.FailedPrecondition},
	}
	for _, c := range bad {
		_, err := h.Register(context.Background(), &controlpb.RegisterRequest{Worker: c.info, Pool: c.pool})
		if status.Code(err) != c.code {
			t.Errorf("%s: Register = %v, want %s", c.name, err, c.code)
		}
	}
	if len(h.Workers()) != 0 || len(h.kinds()) != 0 {
		t.Fatalf("refused registrations left workers %+v / changes %v", h.Workers(), h.kinds())
	}
}

func TestHealthFollowsHeartbeats(t *testing.T) {
	h := newHarness(t, nil)
	if !h.heartbeat(t, "w1", pool(10, 10)) {
		t.Fatal("an unknown worker was not told to register")
	}
	h.register(t, info("w1", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(10, 10))
	if h.heartbeat(t, "w1", pool(10, 8)) {
		t.Fatal("a registered worker was told to register again")
	}
	h.clock.advance(5 * time.Second)
	h.sweep()
	if !h.Workers()[0].Healthy {
		t.Fatal("worker lost before its timeout")
	}
	h.clock.advance(2 * time.Second)
	h.sweep()
	if w := h.Workers(); len(w) != 1 || w[0].Healthy {
		t.Fatalf("silent worker still healthy: %+v", w)
	}
	if !h.heartbeat(t, "w1", pool(10, 10)) {
		t.Fatal("a lost worker's heartbeat was accepted without a new registration")
	}
	h.register(t, info("w1", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(10, 10))
	if !h.Workers()[0].Healthy {
		t.Fatal("re-registration did not bring the worker back")
	}
	h.heartbeat(t, "w1", pool(20, 20)) // capacity change
	h.heartbeat(t, "w1", pool(20, 5))  // fewer free pages: no change
	h.heartbeat(t, "w1", pool(20, 7))  // more free pages
	want := []ChangeKind{Registered, Lost, Registered, Capacity, Freed}
	if got := h.kinds(); len(got) != len(want) {
		t.Fatalf("changes %v, want %v", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("changes %v, want %v", got, want)
			}
		}
	}
	if len(h.dials) != 2 {
		t.Errorf("dialled %v; a worker back from being lost gets a fresh connection (the old one is in reconnect backoff)", h.dials)
	}
	h.register(t, info("w1", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(20, 7))
	if len(h.dials) != 2 {
		t.Errorf("dialled %v; a healthy worker re-registering at the same address must keep its connection", h.dials)
	}
	// Long lost: forgotten.
	h.clock.advance(7 * time.Second)
	h.sweep()
	h.clock.advance(MinForgetAfter + time.Second)
	h.sweep()
	if len(h.Workers()) != 0 {
		t.Fatal("a long-lost worker is still listed")
	}
}

func TestPick(t *testing.T) {
	h := newHarness(t, nil)
	if _, err := h.Pick("tiny", 10); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("Pick with no workers = %v", err)
	}
	// A decode worker alone cannot serve: no prefill.
	h.register(t, info("d-shm", controlpb.Role_ROLE_DECODE, "host-a", "shm"), pool(100, 90))
	if _, err := h.Pick("tiny", 10); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("Pick with a lone decode worker = %v", err)
	}
	// A prefill on another host cannot feed an shm decode worker.
	h.register(t, info("p-b", controlpb.Role_ROLE_PREFILL, "host-b", ""), pool(100, 100))
	if _, err := h.Pick("tiny", 10); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("shm decode paired across hosts: %v", err)
	}
	h.register(t, info("d-tcp", controlpb.Role_ROLE_DECODE, "host-c", "tcp"), pool(100, 50))
	rt, err := h.Pick("tiny", 40)
	if err != nil || rt.Decode.ID() != "d-tcp" || rt.Prefill.ID() != "p-b" || rt.Pages != 3 || rt.FreePages != 50 {
		t.Fatalf("Pick = %+v, %v; want d-tcp fed by p-b, 3 pages, 50 free", rt, err)
	}
	h.register(t, info("p-a", controlpb.Role_ROLE_PREFILL, "host-a", ""), pool(100, 100))
	rt, err = h.Pick("tiny", 40)
	if err != nil || rt.Decode.ID() != "d-shm" || rt.Prefill.ID() != "p-a" {
		t.Fatalf("Pick = %+v, %v; want d-shm (most free) fed by p-a (same host)", rt, err)
	}
	// Pages routed since the last heartbeat count against a worker.
	done := rt.Decode.Begin(60)
	rt, _ = h.Pick("tiny", 40)
	if rt.Decode.ID() != "d-tcp" {
		t.Fatalf("Pick after routing 60 pages to d-shm chose %s", rt.Decode.ID())
	}
	done()
	if rt, _ = h.Pick("tiny", 40); rt.Decode.ID() != "d-shm" || rt.FreePages != 90 {
		t.Fatalf("a finished request's pages still count: %s with %d free", rt.Decode.ID(), rt.FreePages)
	}
	done = rt.Decode.Begin(60)
	h.heartbeat(t, "d-shm", pool(100, 30)) // the worker reports them in use
	done()
	if rt, _ = h.Pick("tiny", 40); rt.Decode.ID() != "d-shm" || rt.FreePages != 90 {
		t.Fatalf("pages freed after a heartbeat still count: %s with %d free", rt.Decode.ID(), rt.FreePages)
	}
	h.heartbeat(t, "d-shm", pool(100, 30))
	h.register(t, info("both", controlpb.Role_ROLE_BOTH, "host-c", "tcp"), pool(100, 40))
	rt, _ = h.Pick("tiny", 40)
	if rt.Decode.ID() != "d-tcp" {
		t.Fatalf("Pick chose %s, want d-tcp (50 free)", rt.Decode.ID())
	}
	h.heartbeat(t, "d-tcp", pool(100, 10))
	rt, _ = h.Pick("tiny", 40)
	if rt.Decode.ID() != "both" || rt.Prefill != nil {
		t.Fatalf("Pick = %s with prefill %v, want the both worker alone", rt.Decode.ID(), rt.Prefill)
	}
	// An shm decode worker keeps its same-host prefill however busy.
	pa, _ := h.Get("p-a")
	pa.Begin(0)
	h.heartbeat(t, "d-shm", pool(100, 100))
	rt, _ = h.Pick("tiny", 40)
	if rt.Decode.ID() != "d-shm" || rt.Prefill.ID() != "p-a" {
		t.Fatalf("shm decode must keep its same-host prefill even when busy: %s/%v", rt.Decode.ID(), rt.Prefill.ID())
	}
	if _, err := h.Pick("other-model", 1); !errors.Is(err, ErrNoWorker) {
		t.Fatal("Pick served a model nobody serves")
	}
}

// TestCordon: a cordoned worker gets no new placement, as decode or as
// prefill, keeps its mark across a re-registration, reports when its
// requests have ended, and is placed on again once uncordoned.
func TestCordon(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, info("d-1", controlpb.Role_ROLE_DECODE, "host-a", "tcp"), pool(100, 90))
	h.register(t, info("d-2", controlpb.Role_ROLE_DECODE, "host-a", "tcp"), pool(100, 50))
	h.register(t, info("p-1", controlpb.Role_ROLE_PREFILL, "host-a", ""), pool(100, 100))
	h.register(t, info("p-2", controlpb.Role_ROLE_PREFILL, "host-a", ""), pool(100, 100))
	if _, ok := h.Cordon("nobody", true); ok {
		t.Fatal("cordoned an unknown worker")
	}
	rt, err := h.Pick("tiny", 40)
	if err != nil || rt.Decode.ID() != "d-1" || rt.Prefill.ID() != "p-1" {
		t.Fatalf("Pick = %+v, %v; want d-1 fed by p-1", rt, err)
	}
	done := rt.Decode.Begin(3)
	s, ok := h.Cordon("d-1", true)
	if !ok || !s.Cordoned || s.Idle() {
		t.Fatalf("cordoned d-1 with a request placed: %+v, want cordoned and not idle", s)
	}
	h.Cordon("p-1", true)
	// Re-registration keeps the mark.
	h.register(t, info("d-1", controlpb.Role_ROLE_DECODE, "host-a", "tcp"), pool(100, 90))
	for range 3 {
		rt, err = h.Pick("tiny", 40)
		if err != nil || rt.Decode.ID() != "d-2" || rt.Prefill.ID() != "p-2" {
			t.Fatalf("Pick with d-1 and p-1 cordoned = %+v, %v; want d-2 fed by p-2", rt, err)
		}
	}
	done()
	if s, _ := h.Cordon("d-1", true); !s.Idle() {
		t.Fatalf("d-1 after its request ended: %+v, want idle", s)
	}
	h.Cordon("d-2", true)
	if _, err := h.Pick("tiny", 40); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("Pick with every decode worker cordoned = %v, want ErrNoWorker", err)
	}
	h.Cordon("d-1", false)
	h.Cordon("p-1", false)
	if rt, err = h.Pick("tiny", 40); err != nil || rt.Decode.ID() != "d-1" {
		t.Fatalf("Pick after uncordoning d-1 = %+v, %v", rt, err)
	}
}

// TestDraining: a worker whose heartbeat says it drains leaves placement
// at once and its snapshot says so; a call it refused as draining counts
// as untouched (placed elsewhere) and marks it too; a registration
// without the flag (its replacement under the same ID) places again.
func TestDraining(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, info("d-1", controlpb.Role_ROLE_DECODE, "host-a", "tcp"), pool(100, 90))
	h.register(t, info("d-2", controlpb.Role_ROLE_DECODE, "host-a", "tcp"), pool(100, 50))
	h.register(t, info("p-1", controlpb.Role_ROLE_PREFILL, "host-a", ""), pool(100, 100))
	h.register(t, info("p-2", controlpb.Role_ROLE_PREFILL, "host-a", ""), pool(100, 100))
	if _, err := h.Heartbeat(context.Background(), &controlpb.HeartbeatRequest{WorkerId: "d-1", Pool: pool(100, 90), Draining: true}); err != nil {
		t.Fatal(err)
	}
	if w, _ := h.Get("d-1"); !w.Snapshot().Draining {
		t.Fatalf("d-1 after a draining heartbeat: %+v", w.Snapshot())
	}
	rt, err := h.Pick("tiny", 40)
	if err != nil || rt.Decode.ID() != "d-2" || rt.Prefill.ID() != "p-1" {
		t.Fatalf("Pick with d-1 draining = %+v, %v; want d-2 fed by p-1", rt, err)
	}

	refusal := controlpb.ErrDraining("test")
	if !Untouched(refusal) || ConnectionLost(refusal) || Untouched(status.Error(codes.Unavailable, "worker is shutting down")) {
		t.Fatal("Untouched/ConnectionLost misread a draining refusal or a shutdown")
	}
	h.MarkDraining("p-1")
	if rt, err = h.Pick("tiny", 40); err != nil || rt.Prefill.ID() != "p-2" {
		t.Fatalf("Pick with p-1 marked draining = %+v, %v; want p-2", rt, err)
	}

	h.register(t, info("d-1", controlpb.Role_ROLE_DECODE, "host-a", "tcp"), pool(100, 100))
	if rt, err = h.Pick("tiny", 40); err != nil || rt.Decode.ID() != "d-1" {
		t.Fatalf("Pick after d-1 registered afresh = %+v, %v; want d-1", rt, err)
	}
}
