package kvtransfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// Stream is one outgoing transfer. Push page chunks as they become ready
// (layer by layer, say), then Complete. Within a page, chunks must arrive
// in byte order without gaps; pages may interleave. Methods may be called
// from several goroutines; they serialise.
//
// Cancelling the context given to Open (or to a Push or Complete in
// progress) stops the stream promptly: a write in flight is interrupted
// (tcp) or stops at the next 256 KiB (shm), then the stream drains — no
// further byte is written — sends DRAIN_ACK and closes. The same happens
// when decode rejects the transfer or asks to abort. Abort does it on
// demand and returns the Drain.
type Stream struct {
	s         *Sender
	t         *Ticket
	raw, conn net.Conn
	seg       *segRef
	tag       ownerTag
	seal      uint64
	npages    int
	pageBytes int
	in        frameReader

	// Guarded by wmu, which is held while writing to the connection or
	// into shared memory.
	wmu      sync.Mutex
	out      frameWriter
	progress []int
	hashers  *wire.PageSums
	sums     []uint64
	bytes    int64
	broken   bool // a frame was written partially: the stream is out of sync
	state    streamState

	// connMu guards handing the connection back to the Sender for reuse:
	// abort interrupts a blocked write only while the stream owns it.
	connMu     sync.Mutex
	handedBack bool

	aborted    atomic.Bool
	causeMu    sync.Mutex
	cause      error
	abortOnce  sync.Once
	drain      Drain
	verdict    chan error // decode's verdict, sent once by readLoop
	readerDone chan struct{}
	closeOnce  sync.Once
	stopCtx    func() bool
	// openDone is the Done channel of Open's context, whose cancellation
	// already aborts the stream.
	openDone <-chan struct{}
}

type streamState int

const (
	streamOpen streamState = iota
	streamCompleting
	streamDone
)

// shmChunk is how much one shm copy step writes before re-checking abort.
const shmChunk = 256 << 10

// errCanceled: an shm Push saw its context end; the caller aborts the
// stream once it no longer holds the write lock.
var errCanceled = errors.New("kvtransfer: push cancelled")

func newStream(s *Sender, t *Ticket, raw, conn net.Conn, cs clientSession) *Stream {
	return &Stream{
		s: s, t: t, raw: raw, conn: conn,
		npages: t.PromptPages(), pageBytes: int(t.PageBytes),
		in:       frameReader{mac: cs.in},
		out:      frameWriter{mac: cs.out},
		hashers:  wire.NewPageSums(int(t.PageBytes), s.hashers),
		verdict:  make(chan error, 1),
		stopCtx:  func() bool { return false },
		tag:      tagOf(t.Owner),
		seal:     sealOf(t.TransferID, t.Owner.Epoch),
		progress: make([]int, t.PromptPages()),
		sums:     make([]uint64, t.PromptPages()),
	}
}

// start runs the verdict reader and ties the stream to ctx.
func (st *Stream) start(ctx context.Context) {
	st.readerDone = make(chan struct{})
	st.openDone = ctx.Done()
	go st.readLoop()
	// Under wmu: with ctx already done the callback runs at once, and its
	// abort closes the stream (reading stopCtx) under wmu.
	st.wmu.Lock()
	st.stopCtx = context.AfterFunc(ctx, func() { st.abort(ctxAbort(ctx)) })
	st.wmu.Unlock()
}

func ctxAbort(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrAborted, context.Cause(ctx))
}

// readLoop waits for decode's verdict (RESULT) or ABORT and hands it to
// Complete; a rejection or abort also drains the stream right away. It
// reads exactly one frame, so a connection handed back for reuse has
// nothing of this transfer left unread.
func (st *Stream) readLoop() {
	defer close(st.readerDone)
	v := st.readVerdict()
	if st.aborted.Load() {
		v = st.abortErr() // our own abort explains whatever decode said after it
	}
	st.verdict <- v
	if v != nil {
		st.abort(v)
	}
}

func (st *Stream) readVerdict() error {
	h, payload, err := st.in.next(st.conn, wire.ResultSize)
	if err != nil {
		return fmt.Errorf("%w: connection to decode: %w", ErrIncomplete, err)
	}
	if h.TransferID != st.t.TransferID || h.Epoch != st.t.Owner.Epoch {
		return fmt.Errorf("%w: decode answered for another transfer or epoch", ErrProtocol)
	}
	switch h.Type {
	case wire.Abort:
		return fmt.Errorf("%w: by decode", ErrAborted)
	case wire.Result:
		code, err := wire.ParseResult(payload)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if code != 0 {
			return fmt.Errorf("kvtransfer: decode rejected transfer %v: %w", st.t.TransferID, codeErr(code))
		}
		return nil
	}
	return fmt.Errorf("%w: unexpected %v frame from decode", ErrProtocol, h.Type)
}

// Push writes data as bytes [offset, offset+len(data)) of page index page
// (position in the ticket). Within a page, offset must continue where the
// previous chunk ended.
func (st *Stream) Push(ctx context.Context, page, offset int, data []byte) error {
	if ctx.Err() != nil {
		// context.AfterFunc would abort too, but on another goroutine.
		st.abort(ctxAbort(ctx))
		return st.abortErr()
	}
	if st.seg != nil {
		// The shm copy polls ctx between chunks: no callback to register
		// per page on the hot path.
		err := st.pushSHM(ctx, page, offset, data)
		if err == errCanceled {
			st.abort(ctxAbort(ctx))
			return st.abortErr()
		}
		return err
	}
	if done := ctx.Done(); done != nil && done != st.openDone {
		stop := context.AfterFunc(ctx, func() { st.abort(ctxAbort(ctx)) })
		defer stop()
	}
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if err := st.checkPush(page, offset, len(data)); err != nil {
		return err
	}
	st.conn.SetWriteDeadline(time.Now().Add(st.s.cfg.WriteTimeout))
	if st.aborted.Load() { // after the deadline: an abort racing us has interrupted it
		return st.abortErr()
	}
	return st.pushTCP(page, offset, data)
}

// checkPush validates a chunk; called under wmu.
func (st *Stream) checkPush(page, offset, n int) error {
	switch {
	case st.aborted.Load():
		return st.abortErr()
	case st.state != streamOpen:
		return fmt.Errorf("%w: push after complete", ErrProtocol)
	case page < 0 || page >= st.npages:
		return fmt.Errorf("%w: page index %d of %d", ErrProtocol, page, st.npages)
	case page < st.t.HeldPages:
		return fmt.Errorf("%w: page index %d is one of the %d pages decode holds", ErrProtocol, page, st.t.HeldPages)
	case offset != st.progress[page]:
		return fmt.Errorf("%w: page %d chunk at %d, expected %d", ErrProtocol, page, offset, st.progress[page])
	case n == 0 || offset+n > st.pageBytes:
		return fmt.Errorf("%w: page %d chunk [%d,+%d) of %d-byte page", ErrProtocol, page, offset, n, st.pageBytes)
	}
	return nil
}

// sum returns page's running checksum after appending piece at offset.
func (st *Stream) sum(page, offset int, piece []byte) uint64 {
	return st.hashers.Add(page, offset, piece)
}

// Complete sends the token count, first sampled token and page checksums,
// and waits for decode's verdict. On success every page is verified on
// decode and the stream is closed (its connection kept for another
// transfer); otherwise the error wraps decode's reason (ErrChecksum,
// ErrIncomplete, ErrTokenCount, …) and the stream drained.
func (st *Stream) Complete(ctx context.Context, tokens int64, firstToken int32) (Result, error) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { st.abort(ctxAbort(ctx)) })
		defer stop()
	}
	if err := st.sendComplete(tokens, firstToken); err != nil {
		return Result{Drain: st.abortWith(err)}, err
	}
	v := <-st.verdict
	if v != nil {
		return Result{Drain: st.abortWith(v)}, v
	}
	<-st.readerDone // nothing reads the connection any more
	st.wmu.Lock()
	if st.state == streamCompleting {
		st.state = streamDone
		st.close(true)
	}
	res := Result{Pages: st.t.SentPages(), Bytes: st.bytes}
	st.wmu.Unlock()
	st.s.stats.completed.Add(1)
	return res, nil
}

func (st *Stream) sendComplete(tokens int64, firstToken int32) error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.aborted.Load() {
		return st.abortErr()
	}
	if st.state != streamOpen {
		return fmt.Errorf("%w: complete called twice", ErrProtocol)
	}
	c := wire.CompletePayload{Tokens: tokens, FirstToken: firstToken, Checksums: st.sums}
	payload := wire.AppendComplete(make([]byte, 0, wire.CompleteSize(st.npages)), &c)
	h := wire.Header{Type: wire.Complete, TransferID: st.t.TransferID, Epoch: st.t.Owner.Epoch}
	st.conn.SetWriteDeadline(time.Now().Add(st.s.cfg.WriteTimeout))
	if st.aborted.Load() {
		return st.abortErr()
	}
	if _, err := st.writeControl(&h, payload); err != nil {
		return st.writeFailed("writing COMPLETE", err)
	}
	st.state = streamCompleting
	return nil
}

// writeFailed explains a failed write to decode; called under wmu. An
// abort's cause says why if there was one. A connection that broke rather
// than timed out was most likely closed by decode after it rejected the
// transfer: its verdict, which arrives first, says why (the reader hands it
// over before it takes wmu to drain the stream).
func (st *Stream) writeFailed(what string, err error) error {
	if st.aborted.Load() {
		return st.abortErr()
	}
	if !isTimeout(err) {
		if v := <-st.verdict; v != nil {
			return v
		}
	}
	return fmt.Errorf("%w: %s: %w", ErrIncomplete, what, err)
}

// writeControl writes a control frame (under wmu), consulting the fault
// injector; it reports whether the frame was written.
func (st *Stream) writeControl(h *wire.Header, payload []byte) (bool, error) {
	if inj := st.s.cfg.Faults; inj != nil && hitSendFrame(inj, h, 0, 0, st.bytes) == faults.Drop {
		st.out.seq++
		return false, nil
	}
	n, err := st.out.write(st.conn, h, payload)
	if err != nil && n > 0 {
		st.broken = true
	}
	return err == nil, err
}

// Abort stops the stream: it waits until no write is in flight, sends
// DRAIN_ACK for (transfer, epoch) and closes. It is idempotent, bounded by
// the configured timeouts, and returns the Drain (the zero Drain after a
// successful Complete: nothing was left to stop).
func (st *Stream) Abort() Drain {
	return st.abortWith(fmt.Errorf("%w: by prefill", ErrAborted))
}

// abortWith aborts (if not yet) and waits for the reader to finish.
func (st *Stream) abortWith(cause error) Drain {
	st.abort(cause)
	if st.readerDone != nil {
		<-st.readerDone
	}
	return st.drain
}

func (st *Stream) abortErr() error {
	st.causeMu.Lock()
	defer st.causeMu.Unlock()
	return st.cause
}

// abort drains the stream once: no further byte is written after it
// returns. It may run on any goroutine (context callback, reader, caller).
func (st *Stream) abort(cause error) {
	st.abortOnce.Do(func() {
		st.causeMu.Lock()
		st.cause = cause
		st.causeMu.Unlock()
		st.aborted.Store(true)
		if st.seg == nil {
			st.interruptWrite()
		}
		st.wmu.Lock() // wait out the write in flight
		defer st.wmu.Unlock()
		if st.state == streamDone {
			return
		}
		st.state = streamDone
		st.drain = Drain{TransferID: st.t.TransferID, Epoch: st.t.Owner.Epoch}
		if !st.broken {
			st.conn.SetWriteDeadline(time.Now().Add(st.s.cfg.DrainAckTimeout))
			h := wire.Header{Type: wire.DrainAck, TransferID: st.t.TransferID, Epoch: st.t.Owner.Epoch}
			st.drain.Acked, _ = st.writeControl(&h, nil)
		}
		st.s.stats.failed.Add(1)
		st.s.stats.drains.Add(1)
		if st.drain.Acked {
			st.s.stats.drainAcks.Add(1)
		}
		st.close(false)
	})
}

// interruptWrite makes a blocked tcp write return at once, unless the
// connection already went back to the Sender for another transfer.
func (st *Stream) interruptWrite() {
	st.connMu.Lock()
	defer st.connMu.Unlock()
	if !st.handedBack {
		st.conn.SetWriteDeadline(time.Unix(1, 0))
	}
}

// close releases the connection — back to the Sender if reuse is set and
// the stream is in step, else closed — and the segment; called under wmu.
func (st *Stream) close(reuse bool) {
	st.closeOnce.Do(func() {
		st.stopCtx()
		if reuse && !st.broken {
			st.connMu.Lock()
			st.handedBack = true
			st.connMu.Unlock()
			st.conn.SetDeadline(time.Time{})
			st.s.putIdle(st.t.Addr, st.raw, st.conn)
		} else {
			st.raw.Close()
		}
		if st.seg != nil {
			st.s.releaseSegment(st.seg)
		}
		st.hashers.Close()
	})
}
