package kvtransfer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// rtransfer is the receiver's record of one admitted transfer.
type rtransfer struct {
	id      TransferID
	epoch   uint64
	backend Backend
	t       *Ticket  // as Lookup returned it when the transfer was admitted
	raw     net.Conn // closed to interrupt the handler
	// wmu is held (tcp) while a frame is copied into a page, so Abort can
	// wait out a copy in flight; aborted is checked under it.
	wmu     sync.Mutex
	aborted atomic.Bool

	// out writes RESULT and ABORT frames, under writeMu.
	writeMu sync.Mutex
	conn    net.Conn
	out     frameWriter

	// Guarded by Receiver.mu.
	drained bool // the sender can write no more: COMPLETE or DRAIN_ACK seen
	held    bool // Abort parked the release until the drain ack
	done    bool // the handler exited
}

// send writes one control frame to the sender.
func (rec *rtransfer) send(typ wire.FrameType, payload []byte, timeout time.Duration) error {
	rec.writeMu.Lock()
	defer rec.writeMu.Unlock()
	rec.conn.SetWriteDeadline(time.Now().Add(timeout))
	h := wire.Header{Type: typ, TransferID: rec.id, Epoch: rec.epoch}
	_, err := rec.out.write(rec.conn, &h, payload)
	return err
}

// handle serves one connection: a transfer, and after each transfer that
// completed cleanly the sender's next one on the same connection (senders
// keep idle connections to skip the dial). Every transfer runs the whole
// handshake with fresh nonces and proves its own ticket's token (I10);
// the connection itself authorises nothing.
func (r *Receiver) handle(raw net.Conn) {
	defer func() {
		raw.Close()
		r.mu.Lock()
		delete(r.conns, raw)
		r.mu.Unlock()
		<-r.sem
		r.wg.Done()
	}()
	r.stats.connections.Add(1)
	conn := raw
	if r.cfg.TLS != nil {
		conn = tls.Server(raw, r.cfg.TLS)
	}
	for reused := false; r.serveOne(raw, conn, reused); reused = true {
	}
}

// serveOne runs one transfer on the connection and reports whether the
// connection can carry another: only after a verified COMPLETE whose
// RESULT went out, with both directions in step.
func (r *Receiver) serveOne(raw, conn net.Conn, reused bool) bool {
	wait := r.cfg.HandshakeTimeout
	if reused {
		wait = r.cfg.IdleConnTimeout
	}
	conn.SetDeadline(time.Now().Add(wait))
	rec, s, err := r.accept(raw, conn)
	if err != nil {
		var ioe errIO
		if reused && errors.As(err, &ioe) {
			return false // the sender closed (or stopped using) an idle connection
		}
		if errors.Is(err, ErrUnauthenticated) {
			r.stats.authFailures.Add(1)
		}
		if errors.Is(err, ErrOwnerMismatch) {
			// An authenticated sender with another owner's KV (tenant,
			// request or adapter): an isolation event, not noise.
			r.log.Warn("kvtransfer: transfer refused: the sender's KV is for another owner", "remote", raw.RemoteAddr(), "err", err)
			return false
		}
		r.log.Debug("kvtransfer: handshake failed", "remote", raw.RemoteAddr(), "err", err)
		return false
	}
	conn.SetDeadline(time.Time{})
	reusable := s.run()
	r.mu.Lock()
	rec.done = true
	if rec.backend == TCP || rec.drained || rec.held {
		// Nothing left to wait for here: tcp writes stopped with this
		// handler; a drained sender writes no more; a held release now
		// lives in the DeferredRelease.
		delete(r.transfers, rec.id)
	}
	r.mu.Unlock()
	return reusable && !rec.aborted.Load()
}

// accept authenticates the peer and claims its transfer. Nothing is read
// beyond the handshake and no Sink method but Lookup is called before the
// peer proved the token.
func (r *Receiver) accept(raw, conn net.Conn) (*rtransfer, *session, error) {
	ss, err := serverAuthenticate(conn, r.sink.Lookup)
	if err != nil {
		return nil, nil, err
	}
	rec, err := r.admit(ss, raw, conn)
	var segID [16]byte
	if err != nil {
		sendAccept(conn, ss.out, err, segID)
		return nil, nil, err
	}
	// The sender computed its KV for the owner its tag names; pages of
	// another tenant, request or adapter are refused before a byte lands,
	// and the transfer fails (I4, I8a).
	var refused error
	if ss.owner != tagOf(rec.t.Owner).wire() {
		refused = fmt.Errorf("%w: transfer %v: the sender's KV is not %v's (tenant, request or adapter differ)", ErrOwnerMismatch, rec.id, rec.t.Owner)
	} else if rec.backend == SHM {
		segID = r.cfg.Segment.ID()
	}
	// Abort may already write an ABORT frame with the same MAC.
	rec.writeMu.Lock()
	aerr := sendAccept(conn, ss.out, refused, segID)
	rec.writeMu.Unlock()
	if aerr != nil || refused != nil {
		// The sender never got the go-ahead, so it wrote nothing.
		r.mu.Lock()
		rec.done, rec.drained = true, true
		held := rec.held
		delete(r.transfers, rec.id)
		r.mu.Unlock()
		if held {
			r.dr.Ack(rec.id, rec.epoch)
		}
		r.stats.failed.Add(1)
		if refused == nil {
			refused = fmt.Errorf("%w: sending accept: %w", ErrIncomplete, aerr)
		}
		r.sink.Fail(rec.t, refused)
		return nil, nil, refused
	}
	r.stats.transfers.Add(1)
	return rec, r.newSession(rec, ss.in, ss.trace), nil
}

// admit claims an authenticated transfer: it must still be live for the
// same epoch and token, well formed, for this backend, and not served by
// another connection. Registration happens under r.mu together with the
// final Lookup, so an Abort either sees the record or the handshake sees the
// transfer gone.
func (r *Receiver) admit(ss serverSession, raw, conn net.Conn) (*rtransfer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.sink.Lookup(ss.t.TransferID)
	switch {
	case r.closed:
		return nil, fmt.Errorf("%w: receiver closed", ErrAborted)
	case !ok || t.Owner.Epoch != ss.t.Owner.Epoch || string(t.AuthToken) != string(ss.t.AuthToken):
		return nil, fmt.Errorf("%w: transfer %v no longer live", ErrStaleEpoch, ss.t.TransferID)
	case r.transfers[t.TransferID] != nil:
		return nil, fmt.Errorf("%w: transfer %v", ErrBusy, t.TransferID)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if ss.backend != t.Backend.code() {
		return nil, fmt.Errorf("%w: sender speaks backend %d, ticket says %s", ErrProtocol, ss.backend, t.Backend)
	}
	if t.Backend == SHM {
		seg := r.cfg.Segment
		if seg == nil || int64(seg.PageBytes()) != t.PageBytes {
			return nil, fmt.Errorf("%w: no segment for %d-byte pages", ErrSegment, t.PageBytes)
		}
		for _, p := range t.Pages[:t.PromptPages()] {
			if int(p) >= seg.Pages() {
				return nil, fmt.Errorf("%w: page %d outside segment", ErrSegment, p)
			}
		}
	}
	rec := &rtransfer{
		id: t.TransferID, epoch: t.Owner.Epoch, backend: t.Backend, t: t,
		raw: raw, conn: conn, out: frameWriter{mac: ss.out},
	}
	r.transfers[rec.id] = rec
	return rec, nil
}
