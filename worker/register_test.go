package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tlsutil"
)

// fakeGateway is a registry that records what workers tell it.
type fakeGateway struct {
	controlpb.UnimplementedRegistryServer
	addr string

	mu         sync.Mutex
	registers  []*controlpb.RegisterRequest
	heartbeats []*controlpb.HeartbeatRequest
	reregister bool  // answer the next heartbeat with reregister
	refuse     error // when set, every Register fails with it
}

func startFakeGateway(t *testing.T) *fakeGateway {
	t.Helper()
	tc, err := tlsutil.ClusterServerConfig(pki.CACert, pki.GatewayCert, pki.GatewayKey, tlsutil.PeerWorker)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGateway{addr: ln.Addr().String()}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	controlpb.RegisterRegistryServer(srv, g)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return g
}

func (g *fakeGateway) Register(_ context.Context, req *controlpb.RegisterRequest) (*controlpb.RegisterResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.registers = append(g.registers, proto.Clone(req).(*controlpb.RegisterRequest))
	if g.refuse != nil {
		return nil, g.refuse
	}
	return &controlpb.RegisterResponse{HeartbeatIntervalMs: 20, GatewayId: "fake"}, nil
}

func (g *fakeGateway) Heartbeat(_ context.Context, req *controlpb.HeartbeatRequest) (*controlpb.HeartbeatResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heartbeats = append(g.heartbeats, proto.Clone(req).(*controlpb.HeartbeatRequest))
	re := g.reregister
	g.reregister = false
	return &controlpb.HeartbeatResponse{Reregister: re}, nil
}

// waitFor polls the recorded calls until cond holds.
func (g *fakeGateway) waitFor(t *testing.T, what string, cond func(regs []*controlpb.RegisterRequest, hbs []*controlpb.HeartbeatRequest) bool) {
	t.Helper()
	if !poll(30*time.Second, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return cond(g.registers, g.heartbeats)
	}) {
		t.Fatalf("gateway never saw %s", what)
	}
}

func lastHeartbeat(hbs []*controlpb.HeartbeatRequest) *controlpb.HeartbeatRequest {
	if len(hbs) == 0 {
		return nil
	}
	return hbs[len(hbs)-1]
}

// TestRegisterAndHeartbeat: the worker registers with every gateway that
// is up (one that is down does not stop it), heartbeats the pool's real
// accounting, and registers again when told to.
func TestRegisterAndHeartbeat(t *testing.T) {
	g := startFakeGateway(t)
	cfg := testConfig(t, config.RoleDecode, config.TransferTCP, testPages, deadAddr(t), g.addr)
	reg := prometheus.NewRegistry()
	w := startWorker(t, cfg, WithRegistry(reg), WithVersion("v1.2.3"))

	g.waitFor(t, "a registration and two heartbeats", func(regs []*controlpb.RegisterRequest, hbs []*controlpb.HeartbeatRequest) bool {
		return len(regs) == 1 && len(hbs) >= 2
	})
	g.mu.Lock()
	first := g.registers[0]
	hb := lastHeartbeat(g.heartbeats)
	g.mu.Unlock()
	// Heartbeats carry the adapter memory (empty, the default capacity).
	if a := hb.GetAdapters(); !proto.Equal(a, &controlpb.AdapterMemory{CapacityBytes: int64(cfg.Worker.Adapters.Memory)}) || a.GetCapacityBytes() != 256<<20 {
		t.Errorf("heartbeat adapters %v, want an empty memory of 256MiB", a)
	}

	tok, err := os.ReadFile(filepath.Join(modelDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tok)
	info := first.GetWorker()
	_, transferPort, _ := net.SplitHostPort(w.transferLn.Addr().String())
	want := &controlpb.WorkerInfo{
		WorkerId: cfg.Worker.ID, Role: controlpb.Role_ROLE_DECODE, Model: "tiny",
		ControlAddr:  w.controlLn.Addr().String(),
		TransferAddr: net.JoinHostPort("127.0.0.1", transferPort), TransferBackend: "tcp",
		HostId: info.GetHostId(), TokenizerSha256: hex.EncodeToString(sum[:]),
		ModelMaxContext: 16384, Backend: "cpu", Version: "v1.2.3",
		// The tiny test model: 2 layers, K and V 32 wide.
		KvDtype: "f32", KvLayout: "layer,kv,slot,kv_dim=2x2xTx32", WeightsSha256: info.GetWeightsSha256(),
		// The prefix cache is on by default: its pages' hash version.
		PrefixCacheVersion: w.version,
		// The structured-output limits it enforces (the defaults).
		ConstraintLimits: &controlpb.ConstraintLimits{SpecBytes: 256 << 10, RegexBytes: 16 << 10, Choices: 1024, Insts: 400_000},
		// Its KV pool's budget: worker.kv.memory_bytes.
		Memory: &controlpb.MemoryPlan{Source: "configured", BudgetBytes: testPages * tinyPageSize},
		// The test model's weights are float32, served as they are.
		WeightsDtype: "f32",
	}
	if !proto.Equal(info, want) || info.GetHostId() == "" || len(info.GetWeightsSha256()) != 64 || w.version == 0 {
		t.Errorf("registered\n%v\nwant\n%v", info, want)
	}
	// The registration is a snapshot of the (empty) prefix cache.
	if pc := first.GetPrefixCache(); !pc.GetSnapshot() || len(pc.GetSealed())+len(pc.GetEvicted()) != 0 {
		t.Errorf("registered prefix cache report %v, want an empty snapshot", pc)
	}
	idle := &controlpb.PoolStats{TotalPages: testPages, FreePages: testPages, PageTokens: pageTokens, CapacityTokens: testPages * pageTokens}
	if !proto.Equal(first.GetPool(), idle) {
		t.Errorf("registered pool %v, want %v", first.GetPool(), idle)
	}
	if v := metricValue(t, w.Worker, "warden_kv_capacity_tokens"); v != testPages*pageTokens {
		t.Errorf("warden_kv_capacity_tokens on the given registry: %v", v)
	}
	if hb.GetWorkerId() != cfg.Worker.ID || !proto.Equal(hb.GetPool(), idle) {
		t.Errorf("heartbeat %v, want worker %s with pool %v", hb, cfg.Worker.ID, idle)
	}

	// A reservation shows in the next heartbeats, and goes away with Abort.
	ctx := context.Background()
	if _, err := w.client.Reserve(ctx, &controlpb.ReserveRequest{Owner: owner("acme", "r1", 1), PromptTokens: 20, TotalTokens: 40}); err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "3 reserved pages", func(_ []*controlpb.RegisterRequest, hbs []*controlpb.HeartbeatRequest) bool {
		p := lastHeartbeat(hbs).GetPool()
		return p.GetReservedPages() == 3 && p.GetFreePages() == testPages-3
	})
	if _, err := w.client.Abort(ctx, &controlpb.AbortRequest{Owner: owner("acme", "r1", 1), Cause: "test"}); err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "the pool free again", func(_ []*controlpb.RegisterRequest, hbs []*controlpb.HeartbeatRequest) bool {
		return proto.Equal(lastHeartbeat(hbs).GetPool(), idle)
	})

	// A gateway that forgot the worker gets a new registration.
	g.mu.Lock()
	g.reregister = true
	g.mu.Unlock()
	g.waitFor(t, "a second registration", func(regs []*controlpb.RegisterRequest, _ []*controlpb.HeartbeatRequest) bool {
		return len(regs) == 2
	})
	waitQuiet(t, w)
}

// TestRefusedRegistration: a refusal is retried by default (its cause may
// pass), and with WithExitOnRefusal ends Run with the gateway's cause.
func TestRefusedRegistration(t *testing.T) {
	cause := status.Error(codes.FailedPrecondition, "worker w: tokenizer: malformed tokenizer.json")
	refusing := func() *fakeGateway {
		g := startFakeGateway(t)
		g.mu.Lock()
		g.refuse = cause
		g.mu.Unlock()
		return g
	}
	g := refusing()
	startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages, g.addr))
	g.waitFor(t, "a second registration after the refusal", func(regs []*controlpb.RegisterRequest, _ []*controlpb.HeartbeatRequest) bool {
		return len(regs) >= 2
	})

	g2 := refusing()
	w := newTestWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages, g2.addr), WithExitOnRefusal())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second): // a hang guard, not a timing check
		t.Fatal("Run does not end after the registration was refused")
	}
	if err == nil || !strings.Contains(err.Error(), "refused the registration") || !strings.Contains(err.Error(), "malformed tokenizer.json") {
		t.Fatalf("Run = %v, want the refusal with its cause", err)
	}
	if !refused(cause) || refused(status.Error(codes.Unavailable, "down")) {
		t.Error("refused() classifies Unavailable as a refusal or FailedPrecondition as not")
	}
}
