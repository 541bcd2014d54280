package worker

import (
	"sync"
	"time"
)

// drainState is how a stopping worker drains itself (worker.drain_timeout):
// it tells every gateway at once (draining in Register and Heartbeat),
// refuses new work with controlpb.ErrDraining (the gateway places such a
// request elsewhere), lets the requests in flight finish, and stops once
// it is idle and every gateway it reaches has heard it.
type drainState struct {
	once    sync.Once
	started chan struct{} // closed when the drain begins
	abort   chan struct{} // closed by AbortNow
	abortMu sync.Mutex

	// unheard: gateways this worker is registered with that have not yet
	// acknowledged a registration or heartbeat carrying draining. Guarded
	// by Worker.mu.
	unheard map[string]bool
}

func (d *drainState) init() {
	d.once.Do(func() {
		d.started = make(chan struct{})
		d.abort = make(chan struct{})
		d.unheard = map[string]bool{}
	})
}

// AbortNow ends a drain at once: the requests still in flight are aborted
// (the gateway hears that the worker is shutting down) without waiting for
// worker.drain_timeout. The CLI calls it on a second SIGTERM or Ctrl-C;
// it is safe to call more than once, before Run's context ends too.
func (w *Worker) AbortNow() {
	w.drain.init()
	w.drain.abortMu.Lock()
	defer w.drain.abortMu.Unlock()
	select {
	case <-w.drain.abort:
	default:
		close(w.drain.abort)
	}
}

// drainingLocked reports whether the drain began. Called with w.mu held.
func (w *Worker) drainingLocked() bool {
	select {
	case <-w.drain.started:
		return true
	default:
		return false
	}
}

// isDraining reports whether the drain began.
func (w *Worker) isDraining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.drainingLocked()
}

// heard records what gateway addr acknowledged: a registration or
// heartbeat that carried draining (told), or one that did not. A gateway
// that fails is dropped: it cannot place work here while unreachable,
// and on its way back it registers with draining set.
func (w *Worker) heard(addr string, ok, told bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok && !told {
		w.drain.unheard[addr] = true
	} else {
		delete(w.drain.unheard, addr)
	}
}

// drainRequests begins the drain and waits until the worker is idle (no
// request holds anything here) and every gateway heard it, the drain
// timeout passed or AbortNow was called. It returns how many requests
// were still in flight.
func (w *Worker) drainRequests() int {
	timeout := w.cfg.Worker.DrainTimeout
	if timeout <= 0 {
		return w.inFlight()
	}
	w.mu.Lock()
	close(w.drain.started)
	n := len(w.reqs)
	w.mu.Unlock()
	w.log.Info("worker draining: gateways told, new work refused; waiting for the requests in flight",
		"in_flight", n, "drain_timeout", timeout)
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		n, unheard := len(w.reqs), len(w.drain.unheard)
		w.mu.Unlock()
		if n == 0 && unheard == 0 {
			w.log.Info("worker drained: every request in flight finished", "duration", time.Since(start))
			return 0
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			w.log.Warn("drain timeout passed: aborting the requests still in flight", "in_flight", n,
				"gateways_not_told", unheard, "drain_timeout", timeout)
			return n
		case <-w.drain.abort:
			w.log.Warn("drain cut short (second signal): aborting the requests still in flight", "in_flight", n)
			return n
		}
	}
}

// inFlight is how many requests hold something here.
func (w *Worker) inFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.reqs)
}
