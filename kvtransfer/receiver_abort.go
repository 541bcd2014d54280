package kvtransfer

import "github.com/warden-ai/warden/kvtransfer/internal/wire"

// Abort is called by the worker after it fenced a transfer's pages (bumped
// the epoch, so CheckWrite and Written refuse the old one) for every
// transfer that did not Complete: aborted requests and failed transfers.
// It makes sure no byte of the transfer lands in a page after release runs:
//   - tcp, or a transfer that never connected, completed or drained: the
//     receiver is, or was, the only writer; Abort closes the connection,
//     waits out a copy in flight and calls release (outcome immediate).
//   - shm still open: the sender may still be writing; Abort asks it to
//     stop (ABORT frame) and parks release until its DRAIN_ACK for this
//     epoch arrives, or quarantine after DrainTimeout.
//
// Call it once per transfer, and not while holding a lock the Sink's
// methods take.
func (r *Receiver) Abort(id TransferID, release, quarantine func()) {
	r.mu.Lock()
	rec := r.transfers[id]
	if rec == nil {
		r.mu.Unlock()
		r.dr.Immediate(release)
		return
	}
	rec.aborted.Store(true)
	if rec.backend == TCP || rec.drained {
		if rec.done {
			delete(r.transfers, id)
		}
		r.mu.Unlock()
		rec.raw.Close()
		rec.wmu.Lock() // wait for a copy in flight; later copies see aborted
		rec.wmu.Unlock()
		r.dr.Immediate(release)
		return
	}
	rec.held = true
	if err := r.dr.Hold(id, rec.epoch, release, quarantine); err != nil {
		r.log.Error("kvtransfer: deferred release", "transfer", id, "err", err)
	}
	alive := !rec.done
	if !alive {
		delete(r.transfers, id)
	}
	r.mu.Unlock()
	if alive {
		// Best effort: the gateway also tells prefill to stop.
		if err := rec.send(wire.Abort, nil, r.cfg.WriteTimeout); err != nil {
			r.log.Debug("kvtransfer: sending ABORT", "transfer", id, "err", err)
		}
	}
}

// WriterDrained records what the transfer connection may no longer be
// able to say: the sender of transfer id at epoch has drained and will
// write no further byte (the gateway relays it from prefill's Abort
// answer, Drain, when the DRAIN_ACK was lost with its connection or the
// session ended on a bad frame). It does what that DRAIN_ACK would have
// done: the transfer's record, if the receiver still has one at that
// epoch, is marked drained, so that Abort releases at once, and a release
// Abort parked for (id, epoch) is acked through the DeferredRelease —
// outcome drained, or late_drain if the pages were quarantined meanwhile.
// It reports whether it found either; for an unknown transfer, or another
// epoch, it changes nothing.
//
// The caller must know the drain for a fact: it comes from the sender
// itself (Stream.Abort, Result.Drain), never from a guess or a timeout.
// Call it not while holding a lock the Sink's methods or the release
// callbacks take.
func (r *Receiver) WriterDrained(id TransferID, epoch uint64) bool {
	r.mu.Lock()
	rec := r.transfers[id]
	marked := rec != nil && rec.epoch == epoch
	if marked {
		rec.drained = true
	}
	r.mu.Unlock()
	acked := r.dr.Ack(id, epoch)
	if marked || acked {
		r.stats.drainRelays.Add(1)
	}
	return marked || acked
}
