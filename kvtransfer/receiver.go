package kvtransfer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Sink is the KV pool side (required).
	Sink Sink
	// Segment is the shared-memory slab shm tickets write into; nil
	// refuses shm transfers.
	Segment *Segment
	// TLS, if set, wraps every connection in TLS (server side). Without it
	// the handshake still authenticates both ends and MACs every frame
	// header, but page bytes are not confidential or protected against an
	// on-path attacker (see the package documentation).
	TLS *tls.Config
	// HandshakeTimeout bounds the handshake (default 10s).
	HandshakeTimeout time.Duration
	// IdleTimeout bounds the wait for the next frame of a transfer
	// (default 2m; prefill of a long prompt may pause between layers).
	IdleTimeout time.Duration
	// DrainTimeout is how long pages of an aborted shm transfer wait for
	// the sender's drain ack before they are quarantined (default 30s).
	DrainTimeout time.Duration
	// WriteTimeout bounds a write of RESULT or ABORT (default 5s).
	WriteTimeout time.Duration
	// MaxConns bounds concurrent connections; more are closed at once
	// (default 1024).
	MaxConns int
	// OnRelease is told how each aborted transfer's pages were released
	// (warden_decode_deferred_kv_release_total{outcome}). Optional.
	OnRelease func(o Outcome, waited time.Duration)
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Receiver is decode's end of the data plane: it accepts transfer
// connections, authenticates them, writes (tcp) or verifies (shm) pages
// through its Sink and reports every transfer's outcome.
type Receiver struct {
	cfg   ReceiverConfig
	sink  Sink
	log   *slog.Logger
	dr    *DeferredRelease
	sem   chan struct{}
	stats receiverCounters
	// hashers recycles streaming checksum state for pages that arrive in
	// several frames.
	hashers sync.Pool

	mu        sync.Mutex
	closed    bool
	transfers map[TransferID]*rtransfer
	conns     map[net.Conn]struct{}
	listeners map[net.Listener]struct{}
	wg        sync.WaitGroup
}

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

// NewReceiver returns a Receiver; call Serve to accept connections.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if cfg.Sink == nil {
		return nil, errors.New("kvtransfer: ReceiverConfig.Sink is nil")
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Receiver{
		cfg:       cfg,
		sink:      cfg.Sink,
		log:       cfg.Logger,
		dr:        NewDeferredRelease(cfg.DrainTimeout, cfg.OnRelease),
		sem:       make(chan struct{}, cfg.MaxConns),
		hashers:   sync.Pool{New: func() any { return xxh3.New() }},
		transfers: make(map[TransferID]*rtransfer),
		conns:     make(map[net.Conn]struct{}),
		listeners: make(map[net.Listener]struct{}),
	}, nil
}

// Serve accepts connections on ln until ctx is done or the Receiver is
// closed (then it returns nil), or Accept fails for good.
func (r *Receiver) Serve(ctx context.Context, ln net.Listener) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	r.listeners[ln] = struct{}{}
	r.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer func() {
		stop()
		r.mu.Lock()
		delete(r.listeners, ln)
		r.mu.Unlock()
	}()
	backoff := 5 * time.Millisecond
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || r.isClosed() {
				return nil
			}
			if isTimeout(err) {
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			return err
		}
		backoff = 5 * time.Millisecond
		select {
		case r.sem <- struct{}{}:
		default:
			r.log.Warn("kvtransfer: connection limit reached", "limit", r.cfg.MaxConns)
			conn.Close()
			continue
		}
		if !r.track(conn) {
			<-r.sem
			conn.Close()
			return nil
		}
		go r.handle(conn)
	}
}

func (r *Receiver) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// track registers a connection for Close; false once closed.
func (r *Receiver) track(conn net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[conn] = struct{}{}
	r.wg.Add(1)
	return true
}

// Close stops accepting, closes every connection, waits for the handlers
// and stops the deferred-release timers.
func (r *Receiver) Close() error {
	r.mu.Lock()
	r.closed = true
	for ln := range r.listeners {
		ln.Close()
	}
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	r.dr.Close()
	return nil
}

// Stats returns a snapshot of the counters.
func (r *Receiver) Stats() ReceiverStats {
	s := r.stats.snapshot()
	r.mu.Lock()
	for _, t := range r.transfers {
		if !t.done {
			s.Active++
		}
	}
	r.mu.Unlock()
	return s
}

// DeferredRelease exposes the receiver's pending holds (for status and
// tests).
func (r *Receiver) DeferredRelease() *DeferredRelease { return r.dr }

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

// send writes one control frame to the sender.
func (rec *rtransfer) send(typ wire.FrameType, payload []byte, timeout time.Duration) error {
	rec.writeMu.Lock()
	defer rec.writeMu.Unlock()
	rec.conn.SetWriteDeadline(time.Now().Add(timeout))
	h := wire.Header{Type: typ, TransferID: rec.id, Epoch: rec.epoch}
	_, err := rec.out.write(rec.conn, &h, payload)
	return err
}

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
	conn.SetDeadline(time.Now().Add(r.cfg.HandshakeTimeout))
	rec, s, err := r.accept(raw, conn)
	if err != nil {
		if errors.Is(err, ErrUnauthenticated) {
			r.stats.authFailures.Add(1)
		}
		r.log.Debug("kvtransfer: handshake failed", "remote", raw.RemoteAddr(), "err", err)
		return
	}
	conn.SetDeadline(time.Time{})
	s.run()
	r.mu.Lock()
	rec.done = true
	if rec.backend == TCP || rec.drained || rec.held {
		// Nothing left to wait for here: tcp writes stopped with this
		// handler; a drained sender writes no more; a held release now
		// lives in the DeferredRelease.
		delete(r.transfers, rec.id)
	}
	r.mu.Unlock()
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
	var aerr error
	if err != nil {
		aerr = sendAccept(conn, ss.out, err, segID)
	} else {
		if rec.backend == SHM {
			segID = r.cfg.Segment.ID()
		}
		// Abort may already write an ABORT frame with the same MAC.
		rec.writeMu.Lock()
		aerr = sendAccept(conn, ss.out, nil, segID)
		rec.writeMu.Unlock()
	}
	if aerr != nil && err == nil {
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
		r.sink.Fail(rec.t, fmt.Errorf("%w: sending accept: %w", ErrIncomplete, aerr))
		return nil, nil, aerr
	}
	if err != nil {
		return nil, nil, err
	}
	r.stats.transfers.Add(1)
	return rec, r.newSession(rec, ss.in), nil
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

// session serves one admitted transfer's frames.
type session struct {
	r    *Receiver
	rec  *rtransfer
	t    *Ticket
	conn net.Conn
	in   frameReader
	// npages is the number of pages the transfer fills.
	npages int
	// tcp: bytes received per page, running checksum state of pages that
	// arrive in several frames, and (tcp and shm) the checksum of each
	// complete page.
	progress []uint32
	hashers  map[int]*xxh3.Hasher
	sums     []uint64
	// shm: pages verified after PAGES_DONE (with their checksum in sums),
	// and the owner tag page headers must carry.
	early []bool
	tag   ownerTag
	// finished: Complete or Fail was called.
	finished bool
	log      *slog.Logger
}

func (r *Receiver) newSession(rec *rtransfer, in *wire.MAC) *session {
	t := rec.t
	n := t.PromptPages()
	s := &session{
		r: r, rec: rec, t: t, conn: rec.conn, in: frameReader{mac: in}, npages: n,
		log: r.log.With("transfer", rec.id, "request_id", t.Owner.Request, "tenant", t.Owner.Tenant, "epoch", rec.epoch),
	}
	s.sums = make([]uint64, n)
	if rec.backend == TCP {
		s.progress = make([]uint32, n)
		s.hashers = make(map[int]*xxh3.Hasher)
	} else {
		s.early = make([]bool, n)
		s.tag = tagOf(t.Owner)
	}
	return s
}

// run reads frames until the transfer is decided and, for shm, the sender
// drained; every exit path has called Complete or Fail.
func (s *session) run() {
	defer func() {
		for _, h := range s.hashers {
			s.r.hashers.Put(h)
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
		s.conn.SetReadDeadline(time.Now().Add(wait))
		if !s.step() {
			return
		}
	}
}

// step handles one frame and reports whether to keep reading.
func (s *session) step() bool {
	h, payload, err := s.in.next(s.conn, wire.CompleteSize(s.npages))
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
		s.log.Warn("kvtransfer: dropped frame of another transfer or epoch", "type", h.Type, "frame_epoch", h.Epoch)
		return s.discard(h)
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
	case wire.PagesDone:
		if s.finished {
			return true
		}
		if s.rec.backend != SHM {
			s.fail(fmt.Errorf("%w: PAGES_DONE frame on a tcp transfer", ErrProtocol))
			return false
		}
		if err := s.pagesDone(payload); err != nil {
			if errors.Is(err, ErrChecksum) {
				s.r.stats.checksumFailures.Add(1)
			}
			s.fail(err)
			return s.awaitDrain()
		}
		return true
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
	if _, err := io.CopyN(io.Discard, s.conn, int64(h.Length)); err != nil {
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

// data copies one DATA frame from the connection straight into its page,
// fenced: the page must be reserved for the transfer's (request, epoch)
// right before the copy, and Abort waits for a copy in flight.
func (s *session) data(h wire.Header) error {
	idx := int(h.PageIndex)
	pb := uint64(s.t.PageBytes)
	switch {
	case idx >= s.npages:
		return fmt.Errorf("%w: page index %d of %d", ErrProtocol, idx, s.npages)
	case h.PageID != s.t.Pages[idx]:
		return fmt.Errorf("%w: page index %d is page %d, frame says %d", ErrProtocol, idx, s.t.Pages[idx], h.PageID)
	case uint64(h.Offset)+uint64(h.Length) > pb:
		return fmt.Errorf("%w: bytes [%d,+%d) beyond page size %d", ErrProtocol, h.Offset, h.Length, pb)
	case h.Offset < s.progress[idx]:
		s.r.stats.duplicateFrms.Add(1)
		return fmt.Errorf("%w: page %d bytes from %d again (have %d)", ErrDuplicate, idx, h.Offset, s.progress[idx])
	case h.Offset > s.progress[idx]:
		return fmt.Errorf("%w: page %d bytes [%d,%d) missing", ErrIncomplete, idx, s.progress[idx], h.Offset)
	}
	sum, err := s.copyIn(h)
	if err != nil {
		return err
	}
	if sum != h.Checksum {
		s.r.stats.checksumFailures.Add(1)
		return fmt.Errorf("%w: page %d bytes [%d,%d)", ErrChecksum, idx, h.Offset, h.Offset+h.Length)
	}
	s.progress[idx] += h.Length
	if uint64(s.progress[idx]) == pb {
		s.sums[idx] = sum
	}
	s.r.stats.frames.Add(1)
	s.r.stats.bytes.Add(uint64(h.Length))
	return nil
}

// copyIn reads the frame payload into the page under the write lock and
// returns the page's running checksum through the end of the frame.
func (s *session) copyIn(h wire.Header) (uint64, error) {
	rec := s.rec
	rec.wmu.Lock()
	defer rec.wmu.Unlock()
	if rec.aborted.Load() {
		return 0, fmt.Errorf("%w: by decode", ErrAborted)
	}
	if err := s.r.sink.CheckWrite(s.t, h.PageID); err != nil {
		s.r.stats.staleFrames.Add(1)
		return 0, fmt.Errorf("%w: page %d fenced: %w", ErrStaleEpoch, h.PageID, err)
	}
	page := s.r.sink.PageData(h.PageID)
	if int64(len(page)) != s.t.PageBytes {
		return 0, fmt.Errorf("%w: sink returned %d bytes for page %d, want %d", ErrProtocol, len(page), h.PageID, s.t.PageBytes)
	}
	dst := page[h.Offset : h.Offset+h.Length]
	if _, err := io.ReadFull(s.conn, dst); err != nil {
		if rec.aborted.Load() {
			return 0, fmt.Errorf("%w: by decode", ErrAborted)
		}
		return 0, fmt.Errorf("%w: connection: %w", ErrIncomplete, err)
	}
	idx := int(h.PageIndex)
	if h.Offset == 0 && int64(h.Length) == s.t.PageBytes {
		return wire.Checksum(dst), nil
	}
	hs := s.hashers[idx]
	if hs == nil {
		hs = s.r.hashers.Get().(*xxh3.Hasher)
		hs.Reset()
		s.hashers[idx] = hs
	}
	hs.Write(dst)
	sum := hs.Sum64()
	if int64(h.Offset+h.Length) == s.t.PageBytes {
		delete(s.hashers, idx)
		s.r.hashers.Put(hs)
	}
	return sum, nil
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
	for i, p := range s.t.Pages[:s.npages] {
		if err := s.r.sink.Written(s.t, p, s.t.PageSlots(i)); err != nil {
			s.fail(fmt.Errorf("%w: marking page %d written: %w", ErrStaleEpoch, p, err))
			return
		}
	}
	s.finished = true
	s.r.stats.completed.Add(1)
	if s.rec.backend == SHM {
		s.r.stats.bytes.Add(uint64(s.npages) * uint64(s.t.PageBytes))
	}
	s.r.sink.Complete(s.t, Completion{
		Tokens: c.Tokens, FirstToken: c.FirstToken,
		Pages: s.npages, Bytes: int64(s.npages) * s.t.PageBytes,
	})
	if err := s.rec.send(wire.Result, resultPayload(nil), s.r.cfg.WriteTimeout); err != nil {
		s.log.Debug("kvtransfer: sending RESULT", "err", err)
	}
}

func (s *session) verifyTCP(c wire.CompletePayload) error {
	for i := range s.npages {
		if int64(s.progress[i]) != s.t.PageBytes {
			return fmt.Errorf("%w: page index %d has %d of %d bytes", ErrIncomplete, i, s.progress[i], s.t.PageBytes)
		}
		if s.sums[i] != c.Checksums[i] {
			return fmt.Errorf("%w: page index %d: received %016x, sender says %016x", ErrChecksum, i, s.sums[i], c.Checksums[i])
		}
	}
	return nil
}

// verifySHM checks, for every page, that it is still reserved for the
// transfer, that its page header names this transfer, epoch and owner with
// every byte written and the checksum COMPLETE gives, and that the data in
// decode's memory has that checksum. Pages already verified after a
// PAGES_DONE with the same header checksum are not hashed again.
func (s *session) verifySHM(c wire.CompletePayload) error {
	var pages []int32
	var want []uint64
	for i, p := range s.t.Pages[:s.npages] {
		if err := s.r.sink.CheckWrite(s.t, p); err != nil {
			return fmt.Errorf("%w: page %d fenced: %w", ErrStaleEpoch, p, err)
		}
		sum, err := s.checkPageHeader(i)
		if err != nil {
			return err
		}
		if sum != c.Checksums[i] {
			return fmt.Errorf("%w: page %d header %016x, COMPLETE %016x", ErrChecksum, p, sum, c.Checksums[i])
		}
		if !s.early[i] || s.sums[i] != sum {
			pages, want = append(pages, p), append(want, sum)
		}
	}
	if i := firstBadPage(s.r.cfg.Segment, pages, want); i >= 0 {
		return fmt.Errorf("%w: page %d data does not match the sender's checksum %016x", ErrChecksum, pages[i], want[i])
	}
	return nil
}

// checkPageHeader checks page index i's shm page header and returns the
// checksum it records.
func (s *session) checkPageHeader(i int) (uint64, error) {
	p := s.t.Pages[i]
	ph, ok := readPageHeader(s.r.cfg.Segment.pageHeaderBytes(p))
	switch {
	case !ok || ph.transferID != s.t.TransferID:
		return 0, fmt.Errorf("%w: page index %d (page %d) not written by this transfer", ErrIncomplete, i, p)
	case ph.epoch != s.t.Owner.Epoch:
		return 0, fmt.Errorf("%w: page %d written for epoch %d, transfer is %d", ErrStaleEpoch, p, ph.epoch, s.t.Owner.Epoch)
	case ph.tag != s.tag:
		return 0, fmt.Errorf("%w: page %d", ErrOwnerMismatch, p)
	case int64(ph.written) != s.t.PageBytes:
		return 0, fmt.Errorf("%w: page %d has %d of %d bytes", ErrIncomplete, p, ph.written, s.t.PageBytes)
	}
	return ph.checksum, nil
}

// pagesDone verifies pages the sender reports finished, while it writes
// the next ones. The authenticated sender promises not to write a page
// again after listing it; pages of other, aborted transfers cannot be
// written here because their release waits for the drain (I5).
func (s *session) pagesDone(payload []byte) error {
	idx, err := wire.ParsePagesDone(payload, s.npages)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	pages := make([]int32, 0, len(idx))
	want := make([]uint64, 0, len(idx))
	for _, i := range idx {
		if s.early[i] {
			return fmt.Errorf("%w: page index %d reported done twice", ErrDuplicate, i)
		}
		sum, err := s.checkPageHeader(int(i))
		if err != nil {
			return err
		}
		pages, want = append(pages, s.t.Pages[i]), append(want, sum)
	}
	if bad := firstBadPage(s.r.cfg.Segment, pages, want); bad >= 0 {
		return fmt.Errorf("%w: page %d data does not match its header checksum %016x", ErrChecksum, pages[bad], want[bad])
	}
	for k, i := range idx {
		s.early[i], s.sums[i] = true, want[k]
	}
	return nil
}

// verifyChunk is how many bytes of pages one verifier goroutine takes at
// least; smaller transfers are verified on the handler's goroutine.
const verifyChunk = 1 << 20

// firstBadPage recomputes the checksum of every page in decode's memory,
// spread over up to GOMAXPROCS goroutines (decode is otherwise idle while
// it verifies, and the pages were just written from another core), and
// returns the index of a page that does not match want, or -1.
func firstBadPage(seg *Segment, pages []int32, want []uint64) int {
	workers := min(runtime.GOMAXPROCS(0), len(pages)*seg.PageBytes()/verifyChunk)
	if workers <= 1 {
		for i, p := range pages {
			if wire.Checksum(seg.Page(p)) != want[i] {
				return i
			}
		}
		return -1
	}
	var next atomic.Int64
	bad := atomic.Int64{}
	bad.Store(-1)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for bad.Load() < 0 {
				i := int(next.Add(1) - 1)
				if i >= len(pages) {
					return
				}
				if wire.Checksum(seg.Page(pages[i])) != want[i] {
					bad.CompareAndSwap(-1, int64(i))
				}
			}
		})
	}
	wg.Wait()
	return int(bad.Load())
}

// fail reports a failed transfer once and tells the sender why.
func (s *session) fail(err error) {
	if s.finished {
		return
	}
	s.finished = true
	s.r.stats.failed.Add(1)
	if errors.Is(err, ErrAborted) {
		s.log.Info("kvtransfer: transfer aborted", "err", err)
	} else {
		s.log.Warn("kvtransfer: transfer failed", "err", err)
	}
	s.r.sink.Fail(s.t, err)
	if serr := s.rec.send(wire.Result, resultPayload(err), s.r.cfg.WriteTimeout); serr != nil {
		s.log.Debug("kvtransfer: sending RESULT", "err", serr)
	}
}

func resultPayload(err error) []byte {
	var code uint16
	if err != nil {
		code = errCode(err)
	}
	b := wire.MarshalResult(code)
	return b[:]
}
