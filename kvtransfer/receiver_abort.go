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
