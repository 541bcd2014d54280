package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/kvpool"
)

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/warden-ai/warden/worker"

// Span names. Together with the gateway's they form one trace per
// request: warden.prefill (prefill) → warden.kv.send (prefill) →
// warden.kv.receive (decode, its parent carried in the transfer
// handshake), and warden.decode (decode) or warden.generate (both).
const (
	spanPrefill  = "warden.prefill"
	spanSend     = "warden.kv.send"
	spanReceive  = "warden.kv.receive"
	spanDecode   = "warden.decode"
	spanGenerate = "warden.generate"
)

// infoLabels are warden_worker_info's labels.
func (w *Worker) infoLabels() prometheus.Labels {
	wc := &w.cfg.Worker
	return prometheus.Labels{
		"worker_id": w.id, "role": string(w.role), "model": wc.Model,
		"backend": string(wc.Backend), "transfer_backend": string(wc.Transfer.Backend),
	}
}

// requestContext returns ctx carrying owner's identity for logs
// (request_id, tenant) next to the trace the call belongs to.
func requestContext(ctx context.Context, owner kvpool.Owner) context.Context {
	return obs.WithRequest(ctx, owner.Request, owner.Tenant)
}

// startSpan starts a span of operation op for owner on this worker.
func (w *Worker) startSpan(ctx context.Context, name, op string, owner kvpool.Owner, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	all := append(obs.RequestAttrs(owner.Request, owner.Tenant, owner.Epoch),
		obs.AttrOperation.String(op), obs.AttrWorkerID.String(w.id), obs.AttrModel.String(w.cfg.Worker.Model))
	return w.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(append(all, attrs...)...))
}

// endSpan ends span with err's status: the gRPC status message for a
// status error (never a prompt or token: the worker's statuses carry
// counts and IDs only).
func endSpan(span trace.Span, err error) {
	if err != nil {
		msg := err.Error()
		if st, ok := status.FromError(err); ok {
			msg = st.Code().String() + ": " + st.Message()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// transferAttrs describe a transfer on its spans.
func transferAttrs(t *kvtransfer.Ticket) []attribute.KeyValue {
	return []attribute.KeyValue{obs.AttrTransferID.String(t.TransferID.String()), obs.AttrBackend.String(string(t.Backend))}
}

// observeReceive is the receiver's OnTransfer hook (decode, both): a
// warden.kv.receive span whose parent is prefill's send span (carried in
// the handshake) or, when prefill sent none, the reservation's context;
// on the verdict it records the receive duration and logs integrity
// failures at ERROR.
func (w *Worker) observeReceive(t *kvtransfer.Ticket, sender trace.SpanContext) func(kvtransfer.Completion, error) {
	owner := kvpool.Owner(t.Owner)
	ctx := requestContext(context.Background(), owner)
	w.mu.Lock()
	if e := w.byTransfer[t.TransferID]; e != nil {
		ctx = e.ctx
	}
	w.mu.Unlock()
	if sender.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sender)
	}
	start := time.Now()
	ctx, span := w.startSpan(ctx, spanReceive, obs.OperationTransfer, owner, trace.SpanKindConsumer, transferAttrs(t)...)
	return func(c kvtransfer.Completion, err error) {
		if err == nil {
			w.metrics.transferSeconds.WithLabelValues(sideReceive).Observe(time.Since(start).Seconds())
			span.SetAttributes(obs.AttrPages.Int(c.Pages), obs.AttrBytes.Int64(c.Bytes))
		} else {
			w.logTransferFailure(ctx, t, err)
		}
		endSpan(span, err)
	}
}

// logTransferFailure logs a failed transfer on decode: integrity failures
// (a checksum mismatch, a frame or page of another epoch or owner, a
// token count other than the ticket's) at ERROR, others lower.
func (w *Worker) logTransferFailure(ctx context.Context, t *kvtransfer.Ticket, err error) {
	level := slog.LevelWarn
	msg := "kv transfer failed"
	switch {
	case errors.Is(err, kvtransfer.ErrAborted):
		level, msg = slog.LevelInfo, "kv transfer aborted"
	case errors.Is(err, kvtransfer.ErrChecksum), errors.Is(err, kvtransfer.ErrStaleEpoch),
		errors.Is(err, kvtransfer.ErrOwnerMismatch), errors.Is(err, kvtransfer.ErrTokenCount):
		level, msg = slog.LevelError, "kv transfer failed an integrity check (I4): request failed, no token generated"
	}
	w.log.Log(ctx, level, msg, "epoch", t.Owner.Epoch, "transfer", t.TransferID.String(),
		"backend", string(t.Backend), "pages", t.PromptPages(), "err", err)
}

// logEngineFailure logs a sequence the engine ended with err: an owner
// violation (I3) at ERROR with the page and owners involved (the request
// was aborted before any token was read from foreign or unwritten slots),
// anything else as a warning.
func (w *Worker) logEngineFailure(ctx context.Context, e *entry, err error) {
	var v *kvpool.ViolationError
	if errors.As(err, &v) {
		w.log.ErrorContext(ctx, "kv owner violation (I3): request aborted without output",
			"epoch", e.owner.Epoch, "page", int64(v.Page), "reason", v.Reason.String(),
			"page_owner", v.Got.String(), "page_state", v.State.String(),
			"slots_written", v.Written, "slots_needed", v.Needed)
		return
	}
	w.log.WarnContext(ctx, "generation failed", "epoch", e.owner.Epoch, "err", err)
}
