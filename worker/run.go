package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Run serves until ctx is done or a listener fails, then shuts down. When
// ctx ends it drains first (worker.drain_timeout, drain.go): the gateways
// are told, new work is refused, and the requests in flight finish. Then it
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

	failed := make(chan error, 3+len(w.cfg.Worker.Gateways))
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
		if w.segment != nil && w.cfg.Worker.Transfer.ReclaimQuarantine {
			serving.Go(func() { w.reclaimLoop(transferCtx) })
		}
	}
	if w.probe != nil {
		// Ready last: a probe that sees /readyz 200 finds /metrics served.
		w.probe.Handle(w.metricsHandler())
		w.probe.SetReady(w.ready)
		serving.Go(func() {
			if err := w.probe.Err(); err != nil {
				failed <- fmt.Errorf("worker: metrics server: %w", err)
			}
		})
	}
	// Registration outlives ctx: a draining worker heartbeats on (with
	// draining set) until it stops.
	regCtx, stopRegistering := context.WithCancel(context.WithoutCancel(ctx))
	var registering sync.WaitGroup
	for _, addr := range w.cfg.Worker.Gateways {
		registering.Go(func() {
			if err := w.registerLoop(regCtx, addr); err != nil {
				failed <- err
			}
		})
	}
	w.log.Info("worker serving", "control", w.controlAddr(), "transfer", w.transferAddr,
		"transfer_backend", string(w.cfg.Worker.Transfer.Backend), "gateways", w.cfg.Worker.Gateways)

	var runErr error
	drained := false
	select {
	case <-ctx.Done():
		w.log.Info("worker shutting down")
		drained = w.drainRequests() == 0
	case runErr = <-failed:
		w.log.Error("worker stopping", "err", runErr)
	}
	stopRegistering()
	registering.Wait()
	w.abortAll()
	w.stopServer(drained)
	w.awaitDrains()
	stopTransfer()
	if w.receiver != nil {
		w.receiver.Close()
	}
	if w.probe != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		w.probe.Shutdown(sctx)
		cancel()
	}
	serving.Wait()
	stopEngine()
	<-engineDone
	return runErr
}

// stopServer stops the control server. After a clean drain it stops
// gracefully (bounded by shutdownGrace): a call that raced with the
// drain still gets its answer (ErrDraining, which the gateway places
// elsewhere) instead of a connection cut under it.
func (w *Worker) stopServer(drained bool) {
	if !drained {
		w.server.Stop()
		return
	}
	done := make(chan struct{})
	go func() { w.server.GracefulStop(); close(done) }()
	t := time.NewTimer(shutdownGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		w.server.Stop()
		<-done
	}
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

// errShuttingDown is the readiness of a worker that drains or stops.
var errShuttingDown = errors.New("shutting down")

// ready is the readiness of a running worker (/readyz, and /healthz as
// before it): it takes work until it drains or stops.
func (w *Worker) ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing || w.drainingLocked() {
		return errShuttingDown
	}
	return nil
}

// metricsHandler serves /metrics and /healthz (the readiness, as /readyz)
// on the metrics listener once the worker runs.
func (w *Worker) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if err := w.ready(); err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	return mux
}
