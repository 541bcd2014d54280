package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/internal/health"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/internal/obs/gpu"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/adapters"
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
	adapters *adapters.Memory // LoRA adapters (worker/adapters)
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
	layout         layout // KV layout and weights hash, for the gateway's agreement check
	version        uint64 // model/format version of sealed prefix pages
	reserveTimeout time.Duration
	transferAddr   string

	controlLn, transferLn, metricsLn net.Listener
	// probe serves metricsLn from New on (internal/health): /livez at
	// once, /readyz and /metrics once Run serves.
	probe *health.Server

	// exitOnRefusal: see WithExitOnRefusal.
	exitOnRefusal bool

	// hooks are test seams; nil in production.
	hooks hooks

	// drain is the worker's own drain on SIGTERM (drain.go).
	drain drainState
	// constraints compiles structured-output constraints (constrain.go).
	constraints constraints
	// late: the broken release's owed writes (brokenrelease.go); only a
	// warden_broken build ever adds to it.
	late lateWrites

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
	// beforeOpen runs before prefill opens its transfer stream.
	beforeOpen func(ctx context.Context)
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
	// exitOnRefusal: see WithExitOnRefusal.
	exitOnRefusal bool
	// progress: see WithProgress.
	progress func(Step)
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

// WithExitOnRefusal makes Run stop with the gateway's cause when a gateway
// refuses the worker's registration, instead of retrying (`warden up`
// uses it to report the cause at once).
func WithExitOnRefusal() Option { return func(o *options) { o.exitOnRefusal = true } }

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
		exitOnRefusal:  o.exitOnRefusal,
	}
	w.drain.init()
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
		if w.probe != nil {
			w.probe.Close()
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
