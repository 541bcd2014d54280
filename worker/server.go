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
	"github.com/warden-ai/warden/kvtransfer"
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

// RenewReservation implements controlpb.WorkerServer.
func (s *server) RenewReservation(ctx context.Context, req *controlpb.RenewReservationRequest) (*controlpb.RenewReservationResponse, error) {
	return s.w.renewReservation(ctx, req)
}

// Prefill implements controlpb.WorkerServer.
func (s *server) Prefill(ctx context.Context, req *controlpb.PrefillRequest) (*controlpb.PrefillResponse, error) {
	return s.w.prefill(ctx, req)
}

// Generate implements controlpb.WorkerServer.
func (s *server) Generate(req *controlpb.GenerateRequest, srv grpc.ServerStreamingServer[controlpb.GenerateEvent]) error {
	return s.w.generate(req, srv)
}

// LoadAdapter implements controlpb.WorkerServer (worker/adapters).
func (s *server) LoadAdapter(srv grpc.ClientStreamingServer[controlpb.AdapterPart, controlpb.LoadAdapterResponse]) error {
	resp, err := s.w.adapters.LoadStream(srv.Context(), s.w.log, srv.Recv)
	if err != nil {
		return err
	}
	return srv.SendAndClose(resp)
}

// Abort implements controlpb.WorkerServer.
func (s *server) Abort(ctx context.Context, req *controlpb.AbortRequest) (*controlpb.AbortResponse, error) {
	return s.w.abort(ctx, req)
}

// WriterDrained implements controlpb.WorkerServer.
func (s *server) WriterDrained(ctx context.Context, req *controlpb.WriterDrainedRequest) (*controlpb.WriterDrainedResponse, error) {
	return s.w.writerDrained(ctx, req)
}

// EvictCacheDomains implements controlpb.WorkerServer.
func (s *server) EvictCacheDomains(_ context.Context, req *controlpb.EvictCacheDomainsRequest) (*controlpb.EvictCacheDomainsResponse, error) {
	return s.w.evictCacheDomains(req)
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
// On prefill the answer names the transfer whose stream stopped early
// (AbortResponse.drain), also when the handler had already ended, so
// that the gateway can relay the drain to decode.
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
		var d *controlpb.Drain
		if drained {
			d = drainPB(w.tombs.drain(key, owner.Epoch))
		}
		w.mu.Unlock()
		w.metrics.aborted(stageNone, cause)
		return &controlpb.AbortResponse{Found: false, Drained: drained, Drain: d}, nil
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
	var d *controlpb.Drain
	if drained {
		w.mu.Lock()
		d = drainPB(e.drain)
		w.mu.Unlock()
	}
	return &controlpb.AbortResponse{Found: true, Drained: drained, Drain: d}, nil
}

// drainPB converts a recorded drain for AbortResponse; nil for none.
func drainPB(d kvtransfer.Drain) *controlpb.Drain {
	if d.IsZero() {
		return nil
	}
	return &controlpb.Drain{TransferId: d.TransferID.String(), Epoch: d.Epoch}
}

// Results of WriterDrained (warden_decode_writer_drain_relays_total).
const (
	relayApplied    = "applied"    // the receiver held or tracked the transfer
	relayUnknown    = "unknown"    // nothing of it here (any more)
	relayMismatched = "mismatched" // the drain contradicts the request
)

// writerDrained handles WriterDrained (decode, both): the gateway relays
// that the writer of a transfer of the request has drained, as its
// prefill worker's Abort answered. The receiver then does what the
// transfer's DRAIN_ACK would have done (Receiver.WriterDrained). A drain
// for a transfer the receiver does not know at that epoch, or one that
// contradicts the request (another epoch than the request's, a transfer
// this worker's table gives to another request), changes nothing: it is
// counted and logged at WARN, and answered applied=false, never an error.
// Only the gateway reaches this call (I10, newClusterAuth).
func (w *Worker) writerDrained(ctx context.Context, req *controlpb.WriterDrainedRequest) (*controlpb.WriterDrainedResponse, error) {
	if w.receiver == nil {
		return nil, status.Error(codes.FailedPrecondition, "WriterDrained: this worker receives no KV transfers")
	}
	owner, err := ownerFrom(req.GetOwner())
	if err != nil {
		return nil, err
	}
	id, err := kvtransfer.ParseTransferID(req.GetDrain().GetTransferId())
	if err != nil {
		return nil, invalid("drain transfer_id: %v", err)
	}
	epoch := req.GetDrain().GetEpoch()
	ctx = requestContext(ctx, owner)
	result := relayApplied
	w.mu.Lock()
	e := w.byTransfer[id]
	w.mu.Unlock()
	switch {
	case epoch != owner.Epoch || (e != nil && e.key != (reqKey{owner.Tenant, owner.Request})):
		result = relayMismatched
	case !w.receiver.WriterDrained(id, epoch):
		result = relayUnknown
	}
	w.metrics.drainRelays.WithLabelValues(result).Inc()
	if result != relayApplied {
		w.log.WarnContext(ctx, "writer drain relayed for a transfer not held here: nothing changed",
			"transfer", id.String(), "drain_epoch", epoch, "epoch", owner.Epoch, "result", result)
		return &controlpb.WriterDrainedResponse{}, nil
	}
	w.log.InfoContext(ctx, "writer drain relayed by the gateway: the transfer's pages are released",
		"transfer", id.String(), "epoch", epoch)
	return &controlpb.WriterDrainedResponse{Applied: true}, nil
}
