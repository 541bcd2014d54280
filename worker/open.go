package worker

import (
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/internal/health"
	"github.com/warden-ai/warden/internal/listenfd"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/internal/obs/gpu"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/adapters"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/model"
	"github.com/warden-ai/warden/worker/runtime"
)

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
	start := time.Now()
	if err := w.openRuntime(); err != nil {
		return err
	}
	w.stepDone(o.progress, Step{Name: "weights", Bytes: weightsBytes(w.rt.Model), KVBytes: w.capacity.Bytes, Duration: time.Since(start)})
	start = time.Now()
	if w.assets, err = loadAssets(w.rt.Model, w.cfg.Worker.Model); err != nil {
		return err
	}
	if w.layout, err = modelLayout(w.rt.Model); err != nil {
		return err
	}
	w.version = w.cacheVersion()
	w.stepDone(o.progress, Step{Name: "assets", Bytes: w.assetsBytes(), Duration: time.Since(start)})
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
	if err := w.registry.Register(w.adapters); err != nil {
		return fmt.Errorf("worker: registering metrics: %w", err)
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
	if w.controlLn, err = listenfd.Listen(wc.Listen); err != nil {
		return fmt.Errorf("worker: control listener (worker.listen): %w", err)
	}
	if w.role != config.RolePrefill {
		if w.transferLn, err = listenfd.Listen(wc.Transfer.Listen); err != nil {
			return fmt.Errorf("worker: transfer listener (worker.transfer.listen): %w", err)
		}
	}
	if addr := w.cfg.Observability.Metrics.Listen; addr != "" {
		if w.metricsLn, err = listenfd.Listen(addr); err != nil {
			return fmt.Errorf("worker: metrics listener (observability.metrics.listen): %w", err)
		}
		// /livez answers from here on, while the weights load; /readyz
		// and /metrics once Run serves.
		w.probe = health.Serve(w.metricsLn)
	}
	return nil
}

// segmentName is the shm file of a worker's KV pool: its ID with anything
// unusual in a file name replaced.
func segmentName(id string) string {
	return "warden-kv-" + regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(id, "_")
}

// convertTo maps worker.dtype's conversions to the runtime's; auto and
// q8 convert nothing (q8 is Options.Quantize).
var convertTo = map[config.DType]model.DType{config.DTypeF32: model.F32, config.DTypeF16: model.F16, config.DTypeBF16: model.BF16}

func (w *Worker) openRuntime() error {
	wc := &w.cfg.Worker
	opt := runtime.Options{
		ModelDir:            wc.ModelDir,
		Backend:             string(wc.Backend),
		Threads:             wc.Threads,
		ComputeSpin:         wc.ComputeSpin,
		DType:               convertTo[wc.WeightsDType()],
		Quantize:            wc.WeightsDType() == config.DTypeQ8,
		BF16Dot:             wc.Numerics == config.NumericsBF16,
		PageTokens:          wc.KV.PageTokens,
		KVBytes:             int64(wc.KV.MemoryBytes),
		KVFraction:          wc.KV.MemoryFraction,
		MemoryHeadroom:      int64(wc.KV.MemoryHeadroom),
		ChunkTokens:         wc.PrefillChunkTokens,
		DecodingChunkTokens: wc.PrefillChunkTokensDecoding,
		ArrivalOrder:        wc.PrefillOrder == config.PrefillArrival,
		MaxBatch:            wc.MaxBatch,
		Speculation: engine.Speculation{On: wc.Speculative.Method == config.SpeculativeNgram,
			K: wc.Speculative.K, NgramMax: wc.Speculative.NgramMax, NgramMin: wc.Speculative.NgramMin},
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
	w.adapters = adapters.New(int64(wc.Adapters.Memory), &rt.Model.Config, rt.PrepareAdapter)
	if wc.Adapters.Memory > 0 && rt.PrepareAdapter == nil {
		w.log.Warn("the compute backend does not compute LoRA adapters: requests naming one are refused", "backend", wc.Backend)
	}
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
