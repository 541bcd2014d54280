package worker

import (
	"time"

	"github.com/warden-ai/warden/internal/brokenmode"
	"github.com/warden-ai/warden/worker/kvpool"
)

// writerByte is what the aborted writer of the broken release keeps
// writing: plausible numbers (0x3C3C… is about 1.15e-2 in float32 and
// 1.06 in float16), not NaNs, so nothing but the changed output shows it.
const writerByte = 0x3C

// releaseWithoutDrain is the test-only broken release of
// brokenmode.ReleaseWithoutDrain (never reached in a normal build, where
// the mode is the constant false), in place of the receiver's deferred
// release: the pages of a request aborted before its KV transfer
// completed are freed at once, without the drain of the transfer's
// writer (I5), put first in line for the next reservation, and a
// stand-in for the aborted writer — a shm sender that did not stop —
// goes on writing into them while the next request holds them. The
// receiver is still told to abort the transfer (its release callbacks do
// nothing: the pages are gone already).
func (w *Worker) releaseWithoutDrain(e *entry, owner kvpool.Owner) {
	pages, err := w.rt.Pool.ReleaseReuseFirst(owner)
	if err != nil {
		w.log.ErrorContext(e.ctx, "broken release", "fenced_epoch", owner.Epoch, "err", err)
		return
	}
	w.log.WarnContext(e.ctx, "WARDEN_BROKEN=release-without-drain: aborted request's pages freed without the writer's drain and handed to the next reservation",
		"epoch", e.epoch, "pages", len(pages))
	w.receiver.Abort(e.ticket.TransferID, func() {}, func() {})
	go lingeringWriter(w.rt.Pool, pages, time.Now().Add(brokenmode.WriterLinger))
}

// lingeringWriter writes writerByte into pages whenever another request
// holds them in use (its transfer complete and verified, its sequence
// running), until every page it wrote has been let go again or the
// deadline passes: a late one-sided write that lands after the next
// request's checksums were checked, while it decodes.
func lingeringWriter(pool *kvpool.Pool, pages []kvpool.PageID, deadline time.Time) {
	reused := false
	for time.Now().Before(deadline) {
		inUse := 0
		for _, id := range pages {
			if info, ok := pool.Page(id); ok && info.Owner != (kvpool.Owner{}) && info.State == kvpool.InUse {
				inUse++
				b := pool.Data(id)
				for i := range b {
					b[i] = writerByte
				}
			}
		}
		if inUse == 0 && reused {
			return
		}
		reused = reused || inUse > 0
		time.Sleep(200 * time.Microsecond)
	}
}
