package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/kvpool"
)

// Registration backoff after a failed Register or Heartbeat.
const (
	backoffMin = 200 * time.Millisecond
	backoffMax = 30 * time.Second
)

// registerTimeout bounds one Register call. The gateway vets a new
// tokenizer inside it (fetches the asset files, tens of MB for some real
// models, and parses them: seconds), so it is far longer than a heartbeat.
const registerTimeout = time.Minute

// registerLoop keeps the worker registered with the gateway at addr until
// ctx ends: Register, then Heartbeat every interval with the pool's
// accounting and the engine's load; register again when the gateway asks
// (it restarted) or after a failure, with capped exponential backoff. A
// gateway that is down only delays this loop; the worker keeps serving.
// A registration the gateway refuses (refused) is logged as an error with
// the gateway's cause; with WithExitOnRefusal the loop returns it, else it
// retries like any failure (the cause may pass, e.g. workers serving
// another tokenizer leave). Stopping simply ends the heartbeats: the
// gateway declares the worker lost after its heartbeat timeout.
func (w *Worker) registerLoop(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, w.auth.registry...)
	if err != nil {
		w.log.Error("cannot dial gateway registry", "gateway", addr, "err", err)
		return nil
	}
	defer conn.Close()
	client := controlpb.NewRegistryClient(conn)
	log := w.log.With("gateway", addr)
	wait := backoffMin
	failing := false
	for ctx.Err() == nil {
		interval, cursor, err := w.register(ctx, client, addr)
		isRefusal := err != nil && refused(err)
		if err == nil {
			log.Info("registered with gateway", "heartbeat_interval", interval)
			failing, wait = false, backoffMin
			err = w.heartbeat(ctx, client, addr, interval, cursor)
		} else if isRefusal {
			log.Error("gateway refused the registration", "code", status.Code(err).String(), "cause", status.Convert(err).Message())
			if w.exitOnRefusal {
				return fmt.Errorf("worker: gateway %s refused the registration: %s", addr, status.Convert(err).Message())
			}
		}
		if err != nil {
			w.heard(addr, false, false)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			log.Info("gateway asked the worker to register again")
			continue
		}
		switch {
		case isRefusal: // logged above
		case !failing:
			log.Warn("gateway registry unreachable; retrying with backoff", "err", err)
		default:
			log.Debug("gateway registry still unreachable", "err", err)
		}
		failing = true
		if !sleep(ctx, jitter(wait)) {
			return nil
		}
		wait = min(2*wait, backoffMax)
	}
	return nil
}

// refused reports whether a Register error is the gateway refusing this
// worker (its model, tokenizer, assets or credentials), not a failure to
// reach it.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// prefixReportDelay is how long a heartbeat that reports prefix-cache
// events waits for more: at most 1/prefixReportDelay early heartbeats a
// second.
const prefixReportDelay = 20 * time.Millisecond

// rpcTimeout bounds one Heartbeat call.
func rpcTimeout(interval time.Duration) time.Duration { return max(interval, time.Second) }

// register announces the worker and returns the heartbeat interval (the
// gateway's when it names one, else worker.heartbeat_interval) and this
// gateway's cursor in the prefix-cache events after the snapshot it sent.
func (w *Worker) register(ctx context.Context, client controlpb.RegistryClient, addr string) (time.Duration, kvpool.CacheCursor, error) {
	interval := w.cfg.Worker.HeartbeatInterval
	cctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	draining := w.isDraining()
	report, cursor := w.prefixReport(0)
	resp, err := client.Register(cctx, &controlpb.RegisterRequest{
		Worker: w.info, Pool: w.poolStats(), Draining: draining, PrefixCache: report,
	})
	if err != nil {
		return 0, 0, err
	}
	w.heard(addr, true, draining)
	if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	return interval, cursor, nil
}

// heartbeat sends heartbeats, every interval and soon after the prefix
// cache sealed or evicted pages, until ctx ends (nil), the gateway asks for
// a new registration (nil) or a heartbeat fails (the error). When the
// worker's drain begins it heartbeats at once, with draining set. cursor
// is this gateway's place in the prefix-cache events.
func (w *Worker) heartbeat(ctx context.Context, client controlpb.RegistryClient, addr string, interval time.Duration, cursor kvpool.CacheCursor) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	drainStarts := w.drain.started
	for {
		var events <-chan struct{} // nil (never ready) without a prefix cache
		if w.prefixCacheEnabled() {
			events = w.rt.Pool.CacheChanged(cursor)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-drainStarts:
			drainStarts = nil // once
		case <-events:
			// Pages were sealed or evicted: report them now rather than
			// at the next tick, after a moment that gathers a burst.
			if !sleep(ctx, prefixReportDelay) {
				return nil
			}
		}
		es := w.rt.Engine.Stats()
		draining := w.isDraining()
		report, next := w.prefixReport(cursor)
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout(interval))
		resp, err := client.Heartbeat(cctx, &controlpb.HeartbeatRequest{
			WorkerId: w.id, Pool: w.poolStats(), Running: int32(es.Running), Waiting: int32(es.Waiting), Draining: draining,
			PrefixCache: report, Adapters: w.adapters.Stats(),
		})
		cancel()
		if err != nil {
			return err
		}
		cursor = next
		if resp.GetReregister() {
			return nil
		}
		w.heard(addr, true, draining)
	}
}

// jitter spreads d by ±20% so that workers restarted together do not
// retry in lockstep.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
