package worker

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
)

// server is the worker's control-plane service, reachable only by the
// gateway (see newClusterAuth).
type server struct {
	controlpb.UnimplementedWorkerServer
	w *Worker
}

var _ controlpb.WorkerServer = (*server)(nil)

// ModelAssets implements controlpb.WorkerServer.
func (s *server) ModelAssets(context.Context, *controlpb.ModelAssetsRequest) (*controlpb.ModelAssetsResponse, error) {
	return s.w.assets, nil
}

// Reserve implements controlpb.WorkerServer.
func (s *server) Reserve(ctx context.Context, req *controlpb.ReserveRequest) (*controlpb.ReserveResponse, error) {
	return s.w.reserve(ctx, req)
}

// Prefill implements controlpb.WorkerServer.
func (s *server) Prefill(ctx context.Context, req *controlpb.PrefillRequest) (*controlpb.PrefillResponse, error) {
	return s.w.prefill(ctx, req)
}

// Generate implements controlpb.WorkerServer.
func (s *server) Generate(req *controlpb.GenerateRequest, srv grpc.ServerStreamingServer[controlpb.GenerateEvent]) error {
	return s.w.generate(req, srv)
}

// Abort implements controlpb.WorkerServer.
func (s *server) Abort(ctx context.Context, req *controlpb.AbortRequest) (*controlpb.AbortResponse, error) {
	return s.w.abort(ctx, req)
}

// Status implements controlpb.WorkerServer.
func (s *server) Status(context.Context, *controlpb.StatusRequest) (*controlpb.WorkerStatus, error) {
	w := s.w
	es := w.rt.Engine.Stats()
	w.mu.Lock()
	reqs := w.listLocked()
	w.mu.Unlock()
	slices.Sort(reqs)
	return &controlpb.WorkerStatus{
		Worker: w.info, Pool: w.poolStats(),
		Running: int32(es.Running), Waiting: int32(es.Waiting), Requests: reqs,
	}, nil
}

// maxCauseLen bounds the informational cause of an Abort in logs.
const maxCauseLen = 64

// abort handles Abort. It is idempotent and returns once the request is
// torn down here: its engine sequence stopped, its pages fenced and freed
// (or, for an shm transfer that may still write, parked until the
// sender's drain ack), and on prefill its transfer stream drained. The
// attempt is remembered, so a call for it that arrives later is refused.
func (w *Worker) abort(ctx context.Context, req *controlpb.AbortRequest) (*controlpb.AbortResponse, error) {
	owner, err := ownerFrom(req.GetOwner())
	if err != nil {
		return nil, err
	}
	cause := req.GetCause()
	if cause == "" {
		cause = "unspecified"
	} else if len(cause) > maxCauseLen {
		cause = cause[:maxCauseLen]
	}
	st := status.Errorf(codes.Aborted, "request aborted (%s)", cause)
	// A worker that can push KV can write no more of the request once the
	// abort returned.
	drained := w.role != config.RoleDecode
	key := reqKey{owner.Tenant, owner.Request}

	w.mu.Lock()
	w.tombs.add(key, owner.Epoch, st, time.Now())
	e := w.reqs[key]
	if e == nil || e.epoch > owner.Epoch {
		w.mu.Unlock()
		w.metrics.aborted(stageNone, cause)
		return &controlpb.AbortResponse{Found: false, Drained: drained}, nil
	}
	stage := e.stage
	then := w.abortLocked(e, st)
	w.mu.Unlock()
	then()
	select {
	case <-e.gone:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	w.metrics.aborted(stage, cause)
	w.log.InfoContext(requestContext(ctx, owner), "request aborted", "epoch", owner.Epoch, "cause", cause, "stage", stage)
	return &controlpb.AbortResponse{Found: true, Drained: drained}, nil
}
