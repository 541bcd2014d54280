package worker

import (
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/kvpool"
)

// sink adapts the worker's KV pool and request table to the transfer
// receiver (decode, both).
type sink Worker

var _ kvtransfer.Sink = (*sink)(nil)

// Lookup implements kvtransfer.Sink: a ticket is live from Reserve until
// its transfer completed or failed, or the reservation was torn down.
func (s *sink) Lookup(id kvtransfer.TransferID) (*kvtransfer.Ticket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byTransfer[id]
	if e == nil || !e.live {
		return nil, false
	}
	return e.ticket, true
}

// CheckWrite implements kvtransfer.Sink with the pool's fence: the page
// must be reserved for the ticket's exact (tenant, request, epoch).
func (s *sink) CheckWrite(t *kvtransfer.Ticket, page int32) error {
	return s.rt.Pool.CheckWrite(kvpool.Owner(t.Owner), kvpool.PageID(page))
}

// PageData implements kvtransfer.Sink; nil for a page outside the pool.
func (s *sink) PageData(page int32) []byte {
	if page < 0 || int(page) >= s.capacity.Pages {
		return nil
	}
	return s.rt.Pool.Data(kvpool.PageID(page))
}

// Written implements kvtransfer.Sink.
func (s *sink) Written(t *kvtransfer.Ticket, page int32, slots int) error {
	return s.rt.Pool.MarkWritten(kvpool.Owner(t.Owner), kvpool.PageID(page), slots)
}

// Complete implements kvtransfer.Sink: the reservation's Generate may
// decode.
func (s *sink) Complete(t *kvtransfer.Ticket, c kvtransfer.Completion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.settleLocked(t)
	if e == nil {
		return
	}
	e.completed, e.completion = true, c
	close(e.transferred)
}

// Fail implements kvtransfer.Sink: the reservation's Generate fails with
// DataLoss (or Aborted); with no Generate waiting, the pages are fenced and
// released through the receiver now, and a later Generate learns why from
// the tombstone.
func (s *sink) Fail(t *kvtransfer.Ticket, err error) {
	s.mu.Lock()
	e := s.settleLocked(t)
	if e == nil {
		s.mu.Unlock()
		return
	}
	e.transferErr = err
	close(e.transferred)
	var then func()
	if !e.handler {
		then = (*Worker)(s).abortLocked(e, receiveStatus(err))
	}
	s.mu.Unlock()
	if then != nil {
		// The Sink must not call back into the receiver.
		go then()
	}
}

// settleLocked marks t's transfer as decided and returns its entry, or nil
// when the reservation is already gone. Called with mu held.
func (s *sink) settleLocked(t *kvtransfer.Ticket) *entry {
	e := s.byTransfer[t.TransferID]
	if e == nil || e.ticket.Owner.Epoch != t.Owner.Epoch {
		return nil
	}
	e.live = false
	delete(s.byTransfer, t.TransferID)
	return e
}
