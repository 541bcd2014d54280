package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/internal/obs/gpu"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/runtime"
)

// Worker is one worker process: a loaded model with its KV pool and
// engine, served to gateways over the control plane. Create it with New,
// then call Run once.
type Worker struct {
	cfg      *config.Config
	id       string
	role     config.Role
	log      *slog.Logger
	rt       *runtime.Runtime
	capacity kvpool.Capacity
	segment  *kvtransfer.Segment  // shm backend on decode/both
	receiver *kvtransfer.Receiver // decode, both
	sender   *kvtransfer.Sender   // prefill, both
	metrics  *metrics
	registry *prometheus.Registry
	gpu      *gpu.Collector
	tracer   trace.Tracer
	// stopTracing flushes the tracer provider New set up (a no-op when
	// the caller passed one).
	stopTracing    func(context.Context) error
	auth           *clusterAuth
	server         *grpc.Server
	info           *controlpb.WorkerInfo
	assets         *controlpb.ModelAssetsResponse
	reserveTimeout time.Duration
	transferAddr   string

	controlLn, transferLn, metricsLn net.Listener

	// hooks are test seams; nil in production.
	hooks hooks

	mu         sync.Mutex
	closing    bool
	reqs       map[reqKey]*entry
	byTransfer map[kvtransfer.TransferID]*entry
	tombs      tombstones

	started bool // Run began (or Close ran)

	runOnce     sync.Once
	releaseOnce sync.Once
}

// hooks let tests stall a request at a chosen point.
type hooks struct {
	// beforePush runs before prefill pushes page index page.
	beforePush func(ctx context.Context, page int)
	// beforeTokens runs before Generate sends a Tokens event.
	beforeTokens func(ctx context.Context)
}

// Option adjusts New.
type Option func(*options)

type options struct {
	logger   *slog.Logger
	registry *prometheus.Registry
	tracer   trace.TracerProvider
	version  string
	faults   *faults.Injector
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegistry registers the worker's metrics on reg and serves reg on
// the metrics listener. By default the worker creates its own registry,
// with the Go runtime and process collectors.
func WithRegistry(reg *prometheus.Registry) Option { return func(o *options) { o.registry = reg } }

// WithVersion sets the version the worker reports when it registers.
func WithVersion(v string) Option { return func(o *options) { o.version = v } }

// WithTracerProvider traces the worker's control RPCs, prefills,
// transfers and decodes with tp. By default the worker sets up the
// provider its configuration's observability.tracing names (obs.SetupTracing)
// and flushes it when Run returns.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// WithTransferFaults hands inj to both transfer ends (kvtransfer's
// SenderConfig.Faults and ReceiverConfig.Faults), for tests that stall,
// drop or corrupt KV transfers of real workers. Without it, as in
// production, nothing is injected.
func WithTransferFaults(inj *faults.Injector) Option { return func(o *options) { o.faults = inj } }

// New opens everything the worker needs, so that a bad configuration fails
// here, before Run: the control, transfer and metrics listeners, the model
// with its KV pool (in a shared-memory segment for the shm backend on
// decode and both), the engine, the transfer ends and the credentials.
// cfg should have passed ValidateWorker.
func New(cfg *config.Config, opts ...Option) (*Worker, error) {
	o := options{logger: slog.Default(), version: "dev"}
	for _, opt := range opts {
		opt(&o)
	}
	wc := &cfg.Worker
	hostname, err := os.Hostname()
	if err != nil {
		hostname = "localhost"
	}
	w := &Worker{
		cfg:            cfg,
		id:             wc.ResolvedID(hostname),
		role:           wc.Role,
		reserveTimeout: wc.Transfer.ReserveTimeout,
		reqs:           make(map[reqKey]*entry),
		byTransfer:     make(map[kvtransfer.TransferID]*entry),
		tombs:          newTombstones(2 * wc.Transfer.ReserveTimeout),
		metrics:        newMetrics(),
		stopTracing:    func(context.Context) error { return nil },
	}
	w.log = o.logger.With("worker_id", w.id, "role", string(w.role))
	if o.tracer == nil {
		tp, stop, err := obs.SetupTracing(context.Background(), cfg.Observability.Tracing, "warden-worker", obs.WithServiceVersion(o.version))
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		o.tracer, w.stopTracing = tp, stop
	}
	w.tracer = o.tracer.Tracer(tracerName)
	if err := w.open(o, hostname); err != nil {
		w.release()
		return nil, err
	}
	return w, nil
}

func (w *Worker) open(o options, hostname string) (err error) {
	switch w.role {
	case config.RolePrefill, config.RoleDecode, config.RoleBoth:
	default:
		return fmt.Errorf("worker: unknown role %q", w.role)
	}
	if w.reserveTimeout <= 0 {
		return fmt.Errorf("worker: worker.transfer.reserve_timeout must be > 0 (got %s)", w.reserveTimeout)
	}
	unary, stream := w.metrics.interceptors()
	if w.auth, err = newClusterAuth(&w.cfg.Cluster, unary, stream); err != nil {
		return err
	}
	if err := w.listen(); err != nil {
		return err
	}
	if err := w.openRuntime(); err != nil {
		return err
	}
	if w.assets, err = loadAssets(w.cfg.Worker.ModelDir, w.cfg.Worker.Model); err != nil {
		return err
	}
	if err := w.openTransfer(o.faults); err != nil {
		return err
	}
	w.registry = o.registry
	if w.registry == nil {
		w.registry = prometheus.NewRegistry()
		w.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	w.gpu = gpu.New(w.log)
	if err := w.metrics.register(w.registry, sources{pool: w.rt.Pool, engine: w.rt.Engine, receiver: w.receiver, sender: w.sender},
		w.gpu, w.infoLabels()); err != nil {
		return err
	}
	w.server = grpc.NewServer(append(w.auth.control,
		grpc.StatsHandler(obs.GRPCServerHandler(o.tracer)),
		grpc.WaitForHandlers(true),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)...)
	controlpb.RegisterWorkerServer(w.server, &server{w: w})
	w.info = w.workerInfo(hostname, o.version)
	return nil
}

func (w *Worker) listen() (err error) {
	wc := &w.cfg.Worker
	if w.controlLn, err = net.Listen("tcp", wc.Listen); err != nil {
		return fmt.Errorf("worker: control listener (worker.listen): %w", err)
	}
	if w.role != config.RolePrefill {
		if w.transferLn, err = net.Listen("tcp", wc.Transfer.Listen); err != nil {
			return fmt.Errorf("worker: transfer listener (worker.transfer.listen): %w", err)
		}
	}
	if addr := w.cfg.Observability.Metrics.Listen; addr != "" {
		if w.metricsLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("worker: metrics listener (observability.metrics.listen): %w", err)
		}
	}
	return nil
}

// segmentName is the shm file of a worker's KV pool: its ID with anything
// unusual in a file name replaced.
func segmentName(id string) string {
	return "warden-kv-" + regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(id, "_")
}

func (w *Worker) openRuntime() error {
	wc := &w.cfg.Worker
	opt := runtime.Options{
		ModelDir:        wc.ModelDir,
		Backend:         string(wc.Backend),
		Threads:         wc.Threads,
		PageTokens:      wc.KV.PageTokens,
		KVBytes:         int64(wc.KV.MemoryBytes),
		KVFraction:      wc.KV.MemoryFraction,
		ChunkTokens:     wc.PrefillChunkTokens,
		MaxBatch:        wc.MaxBatch,
		ZeroOnRelease:   wc.KV.ZeroOnRelease,
		PoisonOnReserve: wc.KV.PoisonOnReserve,
		Logger:          w.log,
	}
	if w.role != config.RolePrefill && wc.Transfer.Backend == config.TransferSHM {
		// Prefill workers write the pool directly (one-sided), so it lives
		// in a shared-memory file they can map.
		path := filepath.Join(wc.Transfer.SHMDir, segmentName(w.id))
		opt.Storage = func(pages, pageBytes int) ([]byte, error) {
			seg, err := kvtransfer.CreateSegment(path, pages, pageBytes)
			if err != nil {
				return nil, err
			}
			w.segment = seg
			return seg.Data(), nil
		}
	}
	rt, err := runtime.Open(opt)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.rt, w.capacity = rt, rt.Capacity
	return nil
}

func (w *Worker) openTransfer(inj *faults.Injector) (err error) {
	t := &w.cfg.Worker.Transfer
	if w.role != config.RolePrefill {
		w.receiver, err = kvtransfer.NewReceiver(kvtransfer.ReceiverConfig{
			Sink:         (*sink)(w),
			Segment:      w.segment,
			TLS:          w.auth.transferServer,
			DrainTimeout: t.DrainTimeout,
			OnRelease:    w.metrics.observeRelease,
			OnTransfer:   w.observeReceive,
			Logger:       w.log,
			Faults:       inj,
		})
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		w.transferAddr = w.advertisedTransferAddr()
	}
	if w.role != config.RoleDecode {
		w.sender, err = kvtransfer.NewSender(kvtransfer.SenderConfig{
			TLS:    w.auth.transferClient,
			ShmDir: t.SHMDir,
			Logger: w.log,
			Faults: inj,
		})
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	return nil
}

// controlAddr is the address gateways dial: worker.advertise_addr, or the
// address the control listener is bound to.
func (w *Worker) controlAddr() string {
	if a := w.cfg.Worker.AdvertiseAddr; a != "" {
		return a
	}
	return w.controlLn.Addr().String()
}

// advertisedTransferAddr is the address prefill workers dial:
// worker.transfer.advertise_addr, or the host of the control address with
// the port the transfer listener is bound to.
func (w *Worker) advertisedTransferAddr() string {
	if a := w.cfg.Worker.Transfer.AdvertiseAddr; a != "" {
		return a
	}
	host, _, err := net.SplitHostPort(w.controlAddr())
	if err != nil {
		host = ""
	}
	_, port, _ := net.SplitHostPort(w.transferLn.Addr().String())
	return net.JoinHostPort(host, port)
}

var rolesPB = map[config.Role]controlpb.Role{
	config.RolePrefill: controlpb.Role_ROLE_PREFILL,
	config.RoleDecode:  controlpb.Role_ROLE_DECODE,
	config.RoleBoth:    controlpb.Role_ROLE_BOTH,
}

func (w *Worker) workerInfo(hostname, version string) *controlpb.WorkerInfo {
	wc := &w.cfg.Worker
	return &controlpb.WorkerInfo{
		WorkerId:        w.id,
		Role:            rolesPB[w.role],
		Model:           wc.Model,
		ControlAddr:     w.controlAddr(),
		TransferAddr:    w.transferAddr,
		TransferBackend: string(wc.Transfer.Backend),
		HostId:          hostID(hostname),
		TokenizerSha256: w.assets.TokenizerSha256,
		ModelMaxContext: int64(w.rt.Model.Config.MaxPositionEmbeddings),
		Backend:         string(wc.Backend),
		Version:         version,
	}
}

// poolStats is the pool's accounting in the protocol's form.
func (w *Worker) poolStats() *controlpb.PoolStats {
	s := w.rt.Pool.Stats()
	return &controlpb.PoolStats{
		TotalPages:       int64(s.Total),
		FreePages:        int64(s.Free),
		ReservedPages:    int64(s.Reserved),
		InUsePages:       int64(s.InUse),
		QuarantinedPages: int64(s.Quarantined),
		PageTokens:       int32(s.PageTokens),
		CapacityTokens:   w.capacity.Tokens,
		OwnerViolations:  int64(s.Violations),
	}
}

// Run serves until ctx is done or a listener fails, then shuts down: it
// stops registering, refuses new requests, aborts those in flight (their
// pages are fenced and released), waits briefly for aborted shm transfers
// to drain, stops the servers and the engine, and frees everything New
// opened (the shm file included). It returns nil after ctx ended. Run may
// be called once.
func (w *Worker) Run(ctx context.Context) error {
	err := errors.New("worker: Run called twice")
	w.runOnce.Do(func() { err = w.run(ctx) })
	return err
}

func (w *Worker) run(ctx context.Context) error {
	w.mu.Lock()
	closed := w.started
	w.started = true
	w.mu.Unlock()
	if closed {
		return errors.New("worker: Run after Close")
	}
	defer w.release()

	engineCtx, stopEngine := context.WithCancel(context.Background())
	engineDone := make(chan struct{})
	go func() {
		w.rt.Run(engineCtx)
		close(engineDone)
	}()

	failed := make(chan error, 3)
	var serving sync.WaitGroup
	serving.Go(func() {
		if err := w.server.Serve(w.controlLn); err != nil {
			failed <- fmt.Errorf("worker: control server: %w", err)
		}
	})
	transferCtx, stopTransfer := context.WithCancel(context.Background())
	defer stopTransfer()
	if w.receiver != nil {
		serving.Go(func() {
			if err := w.receiver.Serve(transferCtx, w.transferLn); err != nil {
				failed <- fmt.Errorf("worker: transfer server: %w", err)
			}
		})
	}
	var httpSrv *http.Server
	if w.metricsLn != nil {
		httpSrv = w.httpServer()
		serving.Go(func() {
			if err := httpSrv.Serve(w.metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("worker: metrics server: %w", err)
			}
		})
	}
	regCtx, stopRegistering := context.WithCancel(ctx)
	var registering sync.WaitGroup
	for _, addr := range w.cfg.Worker.Gateways {
		registering.Go(func() { w.registerLoop(regCtx, addr) })
	}
	w.log.Info("worker serving", "control", w.controlAddr(), "transfer", w.transferAddr,
		"transfer_backend", string(w.cfg.Worker.Transfer.Backend), "gateways", w.cfg.Worker.Gateways)

	var runErr error
	select {
	case <-ctx.Done():
		w.log.Info("worker shutting down")
	case runErr = <-failed:
		w.log.Error("worker stopping", "err", runErr)
	}
	stopRegistering()
	registering.Wait()
	w.abortAll()
	w.server.Stop()
	w.awaitDrains()
	stopTransfer()
	if w.receiver != nil {
		w.receiver.Close()
	}
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		httpSrv.Shutdown(sctx)
		cancel()
	}
	serving.Wait()
	stopEngine()
	<-engineDone
	return runErr
}

// shutdownGrace bounds how long shutdown waits for aborted requests to
// tear down before it stops the control server (which ends their streams,
// unblocking a handler stuck sending to a gateway that stopped reading).
const shutdownGrace = 10 * time.Second

// abortAll refuses new requests and aborts every request in flight; it
// returns once each is torn down, or after shutdownGrace.
func (w *Worker) abortAll() {
	w.mu.Lock()
	w.closing = true
	entries := make([]*entry, 0, len(w.reqs))
	for _, e := range w.reqs {
		entries = append(entries, e)
	}
	w.mu.Unlock()
	st := status.Error(codes.Unavailable, "worker is shutting down")
	deadline := time.After(shutdownGrace)
	for _, e := range entries {
		select {
		case <-w.abortEntry(e, st):
		case <-deadline:
			w.log.Warn("shutting down with requests still tearing down")
			return
		}
	}
}

// awaitDrains waits, at most the drain timeout, for the deferred releases
// of aborted shm transfers (I5): pages still waiting then stay unreleased,
// which is harmless as the process is going away.
func (w *Worker) awaitDrains() {
	if w.receiver == nil {
		return
	}
	dr := w.receiver.DeferredRelease()
	deadline := time.Now().Add(w.cfg.Worker.Transfer.DrainTimeout)
	for {
		held, quarantined := dr.Pending()
		if held == quarantined {
			return
		}
		if time.Now().After(deadline) {
			w.log.Warn("shutting down with KV releases still waiting for a drain ack", "pending", held-quarantined)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (w *Worker) httpServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		w.mu.Lock()
		closing := w.closing
		w.mu.Unlock()
		if closing {
			http.Error(rw, "shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// Close frees what New opened, for a Worker that will not Run (Run frees
// it itself; Close is then a no-op).
func (w *Worker) Close() error {
	w.mu.Lock()
	started := w.started
	w.started = true
	w.mu.Unlock()
	if started {
		return nil
	}
	if w.receiver != nil {
		w.receiver.Close()
	}
	w.release()
	return nil
}

// release closes the listeners, the transfer sender, the runtime, the shm
// segment (removing its file) and NVML, and flushes the traces. The engine
// must not be running.
func (w *Worker) release() {
	w.releaseOnce.Do(func() {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := w.stopTracing(ctx); err != nil {
				w.log.Warn("flushing traces", "err", err)
			}
		}()
		if w.gpu != nil {
			if err := w.gpu.Close(); err != nil {
				w.log.Warn("closing NVML", "err", err)
			}
		}
		for _, ln := range []net.Listener{w.controlLn, w.transferLn, w.metricsLn} {
			if ln != nil {
				ln.Close()
			}
		}
		if w.sender != nil {
			w.sender.Close()
		}
		if w.rt != nil {
			w.rt.Close()
		}
		if w.segment != nil {
			if err := w.segment.Close(); err != nil {
				w.log.Warn("removing the shm segment", "err", err)
			}
		}
	})
}
