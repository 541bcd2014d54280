package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/worker/model"
)

// Shared by every test of the binary: the tiny model, a dev PKI and the
// directory shm segments live in.
var (
	modelDir string
	pki      tlsutil.PKI
	shmDir   string
	workerN  atomic.Int64
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "warden-worker-test-")
	if err != nil {
		panic(err)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		modelDir = filepath.Join(dir, "model")
		if err := model.Init(modelDir, model.PresetTiny, 1, model.F32); err != nil {
			fmt.Fprintln(os.Stderr, "model init:", err)
			return 1
		}
		if pki, err = tlsutil.EnsureDevPKI(filepath.Join(dir, "pki"), nil); err != nil {
			fmt.Fprintln(os.Stderr, "dev PKI:", err)
			return 1
		}
		shmDir = filepath.Join(dir, "shm")
		if err := os.Mkdir(shmDir, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// Pool geometry of test workers: the tiny model's pages are 8 KiB for 16
// tokens.
const (
	pageTokens   = 16
	tinyPageSize = 8192
	testPages    = 64 // 1024 tokens
)

// testConfig is a worker configuration for role on loopback ports chosen
// by the kernel, mTLS with the dev PKI, one compute thread, a poisoned
// pool of pages pages.
func testConfig(t *testing.T, role config.Role, backend config.TransferBackend, pages int, gateways ...string) *config.Config {
	t.Helper()
	cfg := config.Default()
	w := &cfg.Worker
	w.ID = fmt.Sprintf("test-%s-%d", role, workerN.Add(1))
	w.Role = role
	w.ModelDir = modelDir
	w.Threads = 1
	w.Listen = "127.0.0.1:0"
	w.Transfer.Listen = "127.0.0.1:0"
	w.Transfer.Backend = backend
	w.Transfer.SHMDir = shmDir
	w.Transfer.DrainTimeout = 10 * time.Second
	w.KV.MemoryBytes = config.ByteSize(pages * tinyPageSize)
	w.KV.PoisonOnReserve = true
	w.PrefillChunkTokens = 24 // not a page multiple: pages finish mid-chunk
	w.MaxBatch = 4
	w.HeartbeatInterval = 50 * time.Millisecond
	if len(gateways) == 0 {
		gateways = []string{deadAddr(t)}
	}
	w.Gateways = gateways
	cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: pki.CACert, CertFile: pki.WorkerCert, KeyFile: pki.WorkerKey}
	cfg.Observability.LogLevel = "warn"
	if err := cfg.ValidateWorker(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// testHooks lets a test stall requests of a running worker: the worker's
// hooks dispatch to whatever the test installed last.
type testHooks struct {
	open   atomic.Pointer[func(ctx context.Context)]
	push   atomic.Pointer[func(ctx context.Context, page int)]
	tokens atomic.Pointer[func(ctx context.Context)]
}

// started is a running worker under test.
type started struct {
	*Worker
	hooks  *testHooks
	client controlpb.WorkerClient
}

// startWorker runs a worker for cfg until the test ends, then checks that
// Run returned nil and removed its shm file.
func startWorker(t *testing.T, cfg *config.Config, opts ...Option) *started {
	t.Helper()
	w := newTestWorker(t, cfg, opts...)
	stop := w.start()
	segPath := ""
	if w.segment != nil {
		segPath = w.segment.Path()
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("worker %s: Run: %v", w.id, err)
		}
		if segPath != "" {
			if _, err := os.Stat(segPath); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("worker %s left its shm segment %s behind (%v)", w.id, segPath, err)
			}
		}
	})
	return w
}

// newTestWorker creates a worker whose hooks dispatch to testHooks, and a
// gateway client for it.
func newTestWorker(t *testing.T, cfg *config.Config, opts ...Option) *started {
	t.Helper()
	opts = append([]Option{WithLogger(testLogger(t))}, opts...)
	w, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHooks{}
	w.hooks = hooks{
		beforeOpen: func(ctx context.Context) {
			if f := th.open.Load(); f != nil {
				(*f)(ctx)
			}
		},
		beforePush: func(ctx context.Context, page int) {
			if f := th.push.Load(); f != nil {
				(*f)(ctx, page)
			}
		},
		beforeTokens: func(ctx context.Context) {
			if f := th.tokens.Load(); f != nil {
				(*f)(ctx)
			}
		},
	}
	return &started{Worker: w, hooks: th, client: gatewayClient(t, w.controlLn.Addr().String(), pki.GatewayCert, pki.GatewayKey)}
}

// start runs the worker; stop cancels Run and returns its result.
func (w *started) start() (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// testLogger logs warnings and errors through t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// gatewayClient dials a worker's control server with the cluster
// identity of certFile (empty: no client certificate).
func gatewayClient(t *testing.T, addr, certFile, keyFile string, extra ...grpc.DialOption) controlpb.WorkerClient {
	t.Helper()
	tc, err := tlsutil.ClusterClientConfig(pki.CACert, certFile, keyFile, tlsutil.PeerWorker)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlpb.NewWorkerClient(conn)
}

// prompt returns n deterministic token IDs of the tiny vocabulary.
func prompt(n, seed int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*37+seed*101+5)%480 + 16)
	}
	return p
}

func owner(tenant, req string, epoch uint64) *controlpb.Owner {
	return &controlpb.Owner{Tenant: tenant, RequestId: req, Epoch: epoch}
}

// greedy returns greedy sampling for max tokens.
func greedy(max int32) *controlpb.SamplingParams {
	return &controlpb.SamplingParams{MaxTokens: max, IgnoreEos: true}
}

// outcome is what a Generate stream delivered.
type outcome struct {
	ready  int64 // Ready.prompt_tokens; -1 when none came
	tokens []int32
	// choices are the tokens by choice index (Tokens.choice).
	choices map[int32][]int32
	done    *controlpb.Done
	err     error
}

// collect reads a Generate stream to its end and checks the event order:
// Ready first, then Tokens, then Done last.
func collect(t *testing.T, stream grpc.ServerStreamingClient[controlpb.GenerateEvent], err error) outcome {
	t.Helper()
	o := outcome{ready: -1, err: err}
	if err != nil {
		return o
	}
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			if o.done == nil {
				t.Errorf("stream ended without Done")
			}
			return o
		}
		if err != nil {
			o.err = err
			return o
		}
		if o.done != nil {
			t.Errorf("event after Done: %v", ev)
		}
		switch e := ev.Event.(type) {
		case *controlpb.GenerateEvent_Ready:
			if o.ready >= 0 || len(o.tokens) > 0 {
				t.Errorf("Ready out of order")
			}
			o.ready = e.Ready.PromptTokens
		case *controlpb.GenerateEvent_Tokens:
			if o.ready < 0 {
				t.Errorf("Tokens before Ready")
			}
			if len(e.Tokens.Ids) == 0 {
				t.Errorf("empty Tokens event")
			}
			o.tokens = append(o.tokens, e.Tokens.Ids...)
			if o.choices == nil {
				o.choices = map[int32][]int32{}
			}
			o.choices[e.Tokens.Choice] = append(o.choices[e.Tokens.Choice], e.Tokens.Ids...)
		case *controlpb.GenerateEvent_Done:
			if o.ready < 0 {
				t.Errorf("Done before Ready")
			}
			o.done = e.Done
		}
	}
}

// generate runs a Generate to its end.
func generate(t *testing.T, c controlpb.WorkerClient, req *controlpb.GenerateRequest) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := c.Generate(ctx, req)
	return collect(t, stream, err)
}

// code is err's gRPC code.
func code(err error) codes.Code { return status.Code(err) }

// waitQuiet waits until every worker has nothing in flight and its pool
// balances with every page available (free, or cached and unreferenced),
// and fails the test otherwise.
func waitQuiet(t *testing.T, ws ...*started) {
	t.Helper()
	for _, w := range ws {
		var last string
		ok := poll(30*time.Second, func() bool {
			s := w.rt.Pool.Stats()
			if s.Free+s.Reserved+s.InUse+s.Cached+s.Quarantined != s.Total {
				t.Fatalf("worker %s: pool accounting broken: %+v", w.id, s)
			}
			w.mu.Lock()
			n := len(w.reqs) + len(w.byTransfer)
			w.mu.Unlock()
			held := 0
			if w.receiver != nil {
				held, _ = w.receiver.DeferredRelease().Pending()
			}
			last = fmt.Sprintf("%+v, %d table entries, %d deferred releases", s, n, held)
			return s.AvailableNow() == s.Total && n == 0 && held == 0
		})
		if !ok {
			t.Fatalf("worker %s did not settle: %s", w.id, last)
		}
	}
}

// poll calls cond until it holds or limit passes (a liveness bound, not a
// timing assertion).
func poll(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stall makes a hook block once, at the first call where match holds,
// until release is closed or the request's context ends; reached is
// closed when it blocks.
type stall struct {
	once, releaseOnce sync.Once
	reached, release  chan struct{}
}

func newStall(t *testing.T) *stall {
	s := &stall{reached: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(s.unblock)
	return s
}

// unblock lets the stalled call go on.
func (s *stall) unblock() { s.releaseOnce.Do(func() { close(s.release) }) }

func (s *stall) block(ctx context.Context) {
	hit := false
	s.once.Do(func() { hit = true })
	if !hit {
		return
	}
	close(s.reached)
	select {
	case <-s.release:
	case <-ctx.Done():
	}
}

// stallPush installs a push hook that stalls before page index page.
func (w *started) stallPush(t *testing.T, page int) *stall {
	s := newStall(t)
	f := func(ctx context.Context, p int) {
		if p == page {
			s.block(ctx)
		}
	}
	w.hooks.push.Store(&f)
	t.Cleanup(func() { w.hooks.push.Store(nil) })
	return s
}

// stallTokens installs a hook that stalls before the first Tokens event.
func (w *started) stallTokens(t *testing.T) *stall {
	s := newStall(t)
	f := func(ctx context.Context) { s.block(ctx) }
	w.hooks.tokens.Store(&f)
	t.Cleanup(func() { w.hooks.tokens.Store(nil) })
	return s
}

// wait blocks until ch is closed, failing the test after a minute.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// metricValue returns the value of the sample of metric name whose labels
// include the given name/value pairs, from w's registry.
func metricValue(t *testing.T, w *Worker, name string, labels ...string) float64 {
	t.Helper()
	families, err := w.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue samples
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}
