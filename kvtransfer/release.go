package kvtransfer

import (
	"fmt"
	"sync"
	"time"
)

// Outcome is how pages held for a possibly still-writing sender were
// released; the worker counts them in
// warden_decode_deferred_kv_release_total{outcome}.
type Outcome string

// Outcomes.
const (
	// OutcomeImmediate: no writer could still write; released at once.
	OutcomeImmediate Outcome = "immediate"
	// OutcomeDrained: released when the writer's drain ack arrived.
	OutcomeDrained Outcome = "drained"
	// OutcomeTimeout: no ack before the timeout; the pages were quarantined.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeLateDrain: the ack arrived after the timeout; the quarantined
	// pages were released.
	OutcomeLateDrain Outcome = "late_drain"
	// OutcomeReclaimed: no ack came, but Reclaim proved that the writer
	// can write no more; the quarantined pages were released.
	OutcomeReclaimed Outcome = "reclaimed"
)

// DeferredRelease keeps pages that a one-sided writer may still write
// from being reused (I5). Hold parks a release until Ack for the same
// (transfer, epoch) arrives; an ack for any other epoch releases nothing.
// If no ack arrives within the timeout the quarantine callback runs; a later
// ack still releases (the pages leave quarantine).
//
// Callbacks run outside the lock, on the goroutine of Ack, Immediate or a
// timer; for one hold, quarantine (if it runs) always returns before
// release starts, and each runs at most once. It is safe for concurrent use.
type DeferredRelease struct {
	timeout   time.Duration
	onOutcome func(Outcome, time.Duration)

	mu     sync.Mutex
	holds  map[holdKey]*hold
	closed bool
}

type holdKey struct {
	id    TransferID
	epoch uint64
}

type hold struct {
	release, quarantine func()
	start               time.Time
	timer               *time.Timer
	quarantined         bool       // under DeferredRelease.mu
	cb                  sync.Mutex // orders quarantine before release
}

// NewDeferredRelease returns a DeferredRelease that quarantines after
// timeout. onOutcome (may be nil) is told every outcome and how long the
// pages were held.
func NewDeferredRelease(timeout time.Duration, onOutcome func(Outcome, time.Duration)) *DeferredRelease {
	if onOutcome == nil {
		onOutcome = func(Outcome, time.Duration) {}
	}
	return &DeferredRelease{timeout: timeout, onOutcome: onOutcome, holds: make(map[holdKey]*hold)}
}

// Immediate releases pages no writer can touch any more.
func (d *DeferredRelease) Immediate(release func()) {
	release()
	d.onOutcome(OutcomeImmediate, 0)
}

// Hold parks release until Ack(id, epoch). It never calls a callback
// itself. Holding the same (id, epoch) twice, or holding after Close, is an
// error and parks nothing.
func (d *DeferredRelease) Hold(id TransferID, epoch uint64, release, quarantine func()) error {
	k := holdKey{id, epoch}
	h := &hold{release: release, quarantine: quarantine, start: time.Now()}
	d.mu.Lock()
	if _, dup := d.holds[k]; dup {
		d.mu.Unlock()
		return fmt.Errorf("kvtransfer: transfer %v epoch %d already held", id, epoch)
	}
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("kvtransfer: deferred release closed (transfer %v epoch %d stays unreleased)", id, epoch)
	}
	d.holds[k] = h
	h.timer = time.AfterFunc(d.timeout, func() { d.expire(k, h) })
	d.mu.Unlock()
	return nil
}

func (d *DeferredRelease) expire(k holdKey, h *hold) {
	h.cb.Lock()
	defer h.cb.Unlock()
	d.mu.Lock()
	fire := d.holds[k] == h && !h.quarantined
	if fire {
		h.quarantined = true
	}
	d.mu.Unlock()
	if fire {
		h.quarantine()
		d.onOutcome(OutcomeTimeout, time.Since(h.start))
	}
}

// Ack records the drain acknowledgement of (id, epoch) and releases the
// matching hold. It reports whether a hold was released; an ack for
// another epoch of the same transfer releases nothing.
func (d *DeferredRelease) Ack(id TransferID, epoch uint64) bool {
	k := holdKey{id, epoch}
	d.mu.Lock()
	h, ok := d.holds[k]
	if ok {
		delete(d.holds, k)
		h.timer.Stop()
	}
	late := ok && h.quarantined
	d.mu.Unlock()
	if !ok {
		return false
	}
	h.cb.Lock()
	defer h.cb.Unlock()
	h.release()
	if late {
		d.onOutcome(OutcomeLateDrain, time.Since(h.start))
	} else {
		d.onOutcome(OutcomeDrained, time.Since(h.start))
	}
	return true
}

// Reclaim releases the holds that are quarantined now if noWriter then
// reports that none of their writers can write any more (for shm:
// Segment.WritersAttached is false), and returns how many it released
// (OutcomeReclaimed). The holds are listed before noWriter runs, so a
// hold quarantined later — whose writer may have attached after the
// check — is never released by it; one acked meanwhile is released once,
// by Ack.
func (d *DeferredRelease) Reclaim(noWriter func() bool) int {
	d.mu.Lock()
	quarantined := map[holdKey]*hold{}
	for k, h := range d.holds {
		if h.quarantined {
			quarantined[k] = h
		}
	}
	d.mu.Unlock()
	if len(quarantined) == 0 || !noWriter() {
		return 0
	}
	n := 0
	for k, h := range quarantined {
		d.mu.Lock()
		ok := d.holds[k] == h
		if ok {
			delete(d.holds, k)
		}
		d.mu.Unlock()
		if !ok {
			continue
		}
		h.cb.Lock()
		h.release()
		h.cb.Unlock()
		d.onOutcome(OutcomeReclaimed, time.Since(h.start))
		n++
	}
	return n
}

// Pending reports how many holds wait for an ack, and how many of those
// are quarantined.
func (d *DeferredRelease) Pending() (held, quarantined int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.holds {
		held++
		if h.quarantined {
			quarantined++
		}
	}
	return held, quarantined
}

// Close stops the timers. Pages still held stay unreleased (the process is
// going away); later Holds fail.
func (d *DeferredRelease) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, h := range d.holds {
		h.timer.Stop()
	}
}
