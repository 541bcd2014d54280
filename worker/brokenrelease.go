package worker

import (
	"sync"
	"time"

	"github.com/warden-ai/warden/internal/brokenmode"
	"github.com/warden-ai/warden/worker/kvpool"
)

// writerByte is what the aborted writer of the broken release writes:
// plausible numbers (0x3C3C… is about 1.15e-2 in float32 and 1.06 in
// float16), not NaNs, so nothing but the changed output shows it.
const writerByte = 0x3C

// releaseWithoutDrain is the test-only broken release of
// brokenmode.ReleaseWithoutDrain (never reached in a normal build, where
// the mode is the constant false), in place of the receiver's deferred
// release: the pages of a request aborted before its KV transfer
// completed are freed at once, without the drain of the transfer's
// writer (I5), and put first in line for the next reservation; a
// stand-in for the aborted writer — a shm sender that did not stop —
// writes into them: once when the next request activates them
// (lateWrites.land), and again whenever a request holds them in use until
// they are let go (lingeringWriter), over the decode's own writes.
// The receiver is still told to abort the transfer (its release
// callbacks do nothing: the pages are gone already).
func (w *Worker) releaseWithoutDrain(e *entry, owner kvpool.Owner) {
	pages, err := w.rt.Pool.ReleaseReuseFirst(owner)
	if err != nil {
		w.log.ErrorContext(e.ctx, "broken release", "fenced_epoch", owner.Epoch, "err", err)
		return
	}
	w.log.WarnContext(e.ctx, "WARDEN_BROKEN=release-without-drain: aborted request's pages freed without the writer's drain and handed to the next reservation",
		"epoch", e.epoch, "pages", len(pages))
	w.receiver.Abort(e.ticket.TransferID, func() {}, func() {})
	deadline := time.Now().Add(brokenmode.WriterLinger)
	w.late.add(pages, deadline)
	go lingeringWriter(w.rt.Pool, pages, deadline)
}

// lateWrites are the writes the aborted writers of the broken release
// still owe: pages freed without their writer's drain, each until a
// later request activates it or its deadline passes.
//
// The write lands when the next request activates the page — after its
// transfer was verified, before its first decode step — so the prompt KV
// the transfer put there is overwritten whatever the machine's load;
// lingeringWriter also writes over the decode's own writes, which only a
// writer that gets the CPU during the (short) decode can do.
type lateWrites struct {
	mu    sync.Mutex
	until map[kvpool.PageID]time.Time
}

func (l *lateWrites) add(pages []kvpool.PageID, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until == nil {
		l.until = map[kvpool.PageID]time.Time{}
	}
	for _, id := range pages {
		l.until[id] = deadline
	}
}

// land writes writerByte into those of pages (just activated by their
// new holder) that a writer still owes, and returns how many it wrote.
func (l *lateWrites) land(pool *kvpool.Pool, pages []kvpool.PageID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, n := time.Now(), 0
	for _, id := range pages {
		deadline, ok := l.until[id]
		if !ok {
			continue
		}
		delete(l.until, id)
		if now.After(deadline) {
			continue
		}
		b := pool.Data(id)
		for i := range b {
			b[i] = writerByte
		}
		n++
	}
	return n
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
