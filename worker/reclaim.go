package worker

import (
	"context"
	"time"
)

// reclaimLoop (decode over shm, worker.transfer.reclaim_quarantine) tries
// reclaimQuarantined every worker.transfer.drain_timeout (pages are
// quarantined only after one) until ctx ends.
func (w *Worker) reclaimLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.Worker.Transfer.DrainTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.reclaimQuarantined(ctx)
		}
	}
}

// reclaimQuarantined releases, zeroed, the pages quarantined because their
// shm writer never acknowledged its drain, once no process has decode's
// segment mapped as a writer (kvtransfer.Segment.WritersAttached): every
// such writer is then gone or unmapped and can land no late write (the
// protocol model's Reclaim action, kvtransfer/internal/protomodel
// cache.go). A prefill process that is alive, even stalled, keeps its
// mapping, so while one is attached nothing is reclaimed and the pages
// wait for a late drain or a restart as before. It returns how many
// transfers' pages it released.
func (w *Worker) reclaimQuarantined(ctx context.Context) int {
	n := w.receiver.DeferredRelease().Reclaim(func() bool {
		attached, err := w.segment.WritersAttached()
		if err != nil {
			w.log.WarnContext(ctx, "checking for shm writers before reclaiming quarantined pages", "err", err)
		}
		return err == nil && !attached
	})
	if n > 0 {
		w.log.InfoContext(ctx, "quarantined kv pages reclaimed: no process has the shm segment mapped as a writer any more",
			"transfers", n)
	}
	return n
}
