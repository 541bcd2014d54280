package kvtransfer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// session serves one admitted transfer's frames.
type session struct {
	r    *Receiver
	rec  *rtransfer
	t    *Ticket
	conn net.Conn
	// rd reads the connection: through a buffer for tcp (several small
	// frames per read call; large payloads bypass it into the page), direct
	// for shm, whose socket watch must see every unread byte.
	rd io.Reader
	br *bufio.Reader
	in frameReader
	// npages is the number of pages the transfer fills.
	npages int
	// tcp: bytes received per page, running checksum state of pages that
	// arrive in several frames, and the checksum of each complete page.
	progress []uint32
	hashers  *wire.PageSums
	sums     []uint64
	// shm: verifies sealed pages while the sender writes the next ones;
	// watch tells when a frame waits on the connection (nil: unknown).
	shm   *shmVerifier
	watch *socketWatch
	// finished: Complete or Fail was called. ok: Complete was, and the
	// RESULT went out, so the connection may carry another transfer.
	finished, ok bool
	// observed is what ReceiverConfig.OnTransfer returned (nil: no hook).
	observed func(Completion, error)
	log      *slog.Logger // see logger
}

func (r *Receiver) newSession(rec *rtransfer, in *wire.MAC, tc wire.TraceContext) *session {
	t := rec.t
	n := t.PromptPages()
	s := &session{r: r, rec: rec, t: t, conn: rec.conn, rd: rec.conn, in: frameReader{mac: in}, npages: n}
	if r.cfg.OnTransfer != nil {
		s.observed = r.cfg.OnTransfer(t, spanContextOf(tc))
	}
	if rec.backend == TCP {
		s.br = r.readers.Get().(*bufio.Reader)
		s.br.Reset(rec.conn)
		s.rd = s.br
		s.progress = make([]uint32, n)
		s.hashers = wire.NewPageSums(int(t.PageBytes), r.hashers)
		s.sums = make([]uint64, n)
	} else {
		s.shm = newShmVerifier(r.cfg.Segment, t)
		if r.cfg.TLS == nil {
			s.watch = watchSocket(rec.raw)
		}
	}
	return s
}

// logger returns the session's logger, built on first use (most transfers
// log nothing).
func (s *session) logger() *slog.Logger {
	if s.log == nil {
		s.log = s.r.log.With("transfer", s.rec.id, "request_id", s.t.Owner.Request, "tenant", s.t.Owner.Tenant, "epoch", s.rec.epoch)
	}
	return s.log
}

// run reads frames until the transfer is decided and, for shm, the sender
// drained; every exit path has called Complete or Fail. It reports whether
// the transfer completed with the connection in step (reusable).
func (s *session) run() bool {
	defer func() {
		if s.hashers != nil {
			s.hashers.Close()
		}
		if s.br != nil {
			// Bytes left in the buffer belong to no transfer: the sender
			// writes nothing after COMPLETE until the next handshake.
			s.br.Reset(nil)
			s.r.readers.Put(s.br)
		}
		if !s.finished {
			s.fail(fmt.Errorf("%w: receiver stopped", ErrAborted))
		}
	}()
	for {
		wait := s.r.cfg.IdleTimeout
		if s.finished {
			wait = s.r.cfg.DrainTimeout
		}
		deadline := time.Now().Add(wait)
		if s.shm != nil && !s.finished {
			if err := s.pump(deadline); err != nil {
				// A sealed page is bad: fail now, so the sender stops.
				if errors.Is(err, ErrChecksum) {
					s.r.stats.checksumFailures.Add(1)
				}
				s.fail(err)
				if !s.awaitDrain() {
					return s.ok
				}
				continue
			}
		}
		s.conn.SetReadDeadline(deadline)
		if !s.step() {
			return s.ok
		}
	}
}

// step handles one frame and reports whether to keep reading.
func (s *session) step() bool {
	h, payload, err := s.in.next(s.rd, wire.CompleteSize(s.npages))
	if err != nil {
		var ioe errIO
		switch {
		case s.rec.aborted.Load():
			s.fail(fmt.Errorf("%w: by decode", ErrAborted))
			return false
		case errors.As(err, &ioe):
			wasFinished := s.finished
			s.fail(fmt.Errorf("%w: connection: %w", ErrIncomplete, ioe.err))
			// After an idle timeout an shm sender may still write: keep
			// listening for its drain ack, once.
			return !wasFinished && isTimeout(ioe.err) && s.awaitDrain()
		case errors.Is(err, ErrUnauthenticated):
			s.r.stats.authFailures.Add(1)
		case errors.Is(err, ErrDuplicate):
			s.r.stats.duplicateFrms.Add(1)
		case errors.Is(err, ErrChecksum):
			s.r.stats.checksumFailures.Add(1)
		}
		s.fail(err) // the stream cannot be trusted further
		return false
	}
	if h.TransferID != s.rec.id || h.Epoch != s.rec.epoch {
		if h.TransferID != s.rec.id {
			s.r.stats.unknownFrames.Add(1)
		} else {
			s.r.stats.staleFrames.Add(1)
		}
		// A frame for another (transfer, epoch) on this connection is an
		// isolation event (I4): a stale or confused writer was fenced.
		s.logger().Error("kvtransfer: dropped frame of another transfer or epoch", "type", h.Type.String(),
			"frame_transfer", TransferID(h.TransferID).String(), "frame_epoch", h.Epoch, "page_index", h.PageIndex, "page", h.PageID)
		return s.discard(h)
	}
	if inj := s.r.cfg.Faults; inj != nil {
		if inj.Hit(&faults.Event{Point: faults.RecvFrame, Transfer: h.TransferID, Epoch: h.Epoch, Frame: faultFrame(&h)}) == faults.Drop {
			return s.discard(h)
		}
	}
	switch h.Type {
	case wire.Data:
		if s.finished {
			return s.discard(h)
		}
		if s.rec.backend != TCP {
			s.fail(fmt.Errorf("%w: DATA frame on an shm transfer", ErrProtocol))
			return false
		}
		if err := s.data(h); err != nil {
			s.fail(err)
			return false
		}
		return true
	case wire.Complete:
		s.markDrained() // the sender writes nothing after COMPLETE
		if s.finished {
			return false
		}
		c, err := wire.ParseComplete(payload, s.npages)
		if err != nil {
			s.fail(fmt.Errorf("%w: %w", ErrProtocol, err))
			return false
		}
		s.complete(c)
		return false
	case wire.DrainAck:
		s.r.stats.drainAcks.Add(1)
		s.markDrained()
		if !s.finished {
			s.fail(fmt.Errorf("%w: by sender", ErrAborted))
		}
		return false
	}
	s.fail(fmt.Errorf("%w: unexpected %v frame from sender", ErrProtocol, h.Type))
	return false
}

// awaitDrain reports whether the handler should keep reading after a
// failure: only for an shm sender that has not drained.
func (s *session) awaitDrain() bool {
	if s.rec.backend != SHM {
		return false
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return !s.rec.drained
}

// discard skips a dropped frame's payload without touching any page.
func (s *session) discard(h wire.Header) bool {
	if h.Type != wire.Data {
		return true // control payloads were already read
	}
	if _, err := io.CopyN(io.Discard, s.rd, int64(h.Length)); err != nil {
		s.fail(fmt.Errorf("%w: connection: %w", ErrIncomplete, err))
		return false
	}
	return true
}

// markDrained records that the sender can write no more and releases a
// parked release.
func (s *session) markDrained() {
	s.r.mu.Lock()
	s.rec.drained = true
	held := s.rec.held
	s.r.mu.Unlock()
	if held {
		s.r.dr.Ack(s.rec.id, s.rec.epoch)
	}
}

// complete verifies a COMPLETE frame (I4) and, only if everything holds,
// marks the pages written and reports Complete.
func (s *session) complete(c wire.CompletePayload) {
	if c.Tokens != s.t.PromptTokens {
		s.fail(fmt.Errorf("%w: sender says %d tokens, ticket %d", ErrTokenCount, c.Tokens, s.t.PromptTokens))
		return
	}
	var err error
	if s.rec.backend == TCP {
		err = s.verifyTCP(c)
	} else {
		err = s.verifySHM(c)
	}
	if err != nil {
		if errors.Is(err, ErrChecksum) {
			s.r.stats.checksumFailures.Add(1)
		}
		s.fail(err)
		return
	}
	for i := s.t.HeldPages; i < s.npages; i++ {
		p := s.t.Pages[i]
		if err := s.r.sink.Written(s.t, p, s.t.PageSlots(i)); err != nil {
			s.fail(fmt.Errorf("%w: marking page %d written: %w", ErrStaleEpoch, p, err))
			return
		}
	}
	s.finished = true
	s.r.stats.completed.Add(1)
	sent := s.t.SentPages()
	if s.rec.backend == SHM {
		s.r.stats.bytes.Add(uint64(sent) * uint64(s.t.PageBytes))
	}
	done := Completion{
		Tokens: c.Tokens, FirstToken: c.FirstToken,
		Pages: sent, Bytes: int64(sent) * s.t.PageBytes,
	}
	// The hook first: what it records (the span, a failure's log record)
	// then precedes anything the request does once the sink wakes it.
	if s.observed != nil {
		s.observed(done, nil)
	}
	s.r.sink.Complete(s.t, done)
	s.ok = s.sendResult(nil)
}

// fail reports a failed transfer once and tells the sender why.
func (s *session) fail(err error) {
	if s.finished {
		return
	}
	s.finished = true
	s.r.stats.failed.Add(1)
	if errors.Is(err, ErrAborted) {
		s.logger().Info("kvtransfer: transfer aborted", "err", err)
	} else {
		s.logger().Warn("kvtransfer: transfer failed", "err", err)
	}
	if s.observed != nil { // first, as in complete
		s.observed(Completion{}, err)
	}
	s.r.sink.Fail(s.t, err)
	s.sendResult(err)
}

// sendResult writes the verdict (err nil: accepted) and reports whether it
// went out.
func (s *session) sendResult(err error) bool {
	if inj := s.r.cfg.Faults; inj != nil {
		f := faults.Frame{Type: wire.Result.String(), TransferID: s.rec.id, Epoch: s.rec.epoch}
		if inj.Hit(&faults.Event{Point: faults.SendResult, Transfer: s.rec.id, Epoch: s.rec.epoch, Frame: &f}) == faults.Drop {
			return false
		}
	}
	var code uint16
	if err != nil {
		code = errCode(err)
	}
	b := wire.MarshalResult(code)
	if serr := s.rec.send(wire.Result, b[:], s.r.cfg.WriteTimeout); serr != nil {
		s.logger().Debug("kvtransfer: sending RESULT", "err", serr)
		return false
	}
	return true
}
