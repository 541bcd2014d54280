package kvtransfer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/warden-ai/warden/kvtransfer/internal/faults"
	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// TLS, if set, wraps connections in TLS (client side). ServerName
	// defaults to the host of the ticket's address.
	TLS *tls.Config
	// Dial opens connections (default net.Dialer.DialContext).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ShmDir is the only directory shm segments are opened from (default
	// /dev/shm), so a ticket cannot point prefill at an arbitrary file.
	ShmDir string
	// HandshakeTimeout bounds dial plus handshake (default 10s).
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one blocked write (default 30s).
	WriteTimeout time.Duration
	// DrainAckTimeout bounds the write of a DRAIN_ACK (default 5s).
	DrainAckTimeout time.Duration
	// MaxFramePayload splits page chunks into DATA frames of at most this
	// many bytes (default 1 MiB, at most 4 MiB).
	MaxFramePayload int
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Faults injects faults in tests; only kvtransfer's own tests can set it.
	Faults *faults.Injector
}

// Sender is prefill's end of the data plane. It is safe for concurrent
// use; each transfer is a Stream.
type Sender struct {
	cfg     SenderConfig
	log     *slog.Logger
	stats   senderCounters
	hashers sync.Pool

	mu     sync.Mutex
	segs   map[string]*segRef
	closed bool
}

// segRef is a mapped segment shared by the streams writing into it.
type segRef struct {
	seg   *Segment
	refs  int
	stale bool // replaced by a newer mapping of the path, or the Sender closed
}

// NewSender returns a Sender.
func NewSender(cfg SenderConfig) (*Sender, error) {
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	if cfg.ShmDir == "" {
		cfg.ShmDir = "/dev/shm"
	}
	if !filepath.IsAbs(cfg.ShmDir) {
		return nil, fmt.Errorf("kvtransfer: ShmDir %q is not absolute", cfg.ShmDir)
	}
	cfg.ShmDir = filepath.Clean(cfg.ShmDir)
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.DrainAckTimeout <= 0 {
		cfg.DrainAckTimeout = 5 * time.Second
	}
	if cfg.MaxFramePayload <= 0 {
		cfg.MaxFramePayload = 1 << 20
	}
	cfg.MaxFramePayload = min(cfg.MaxFramePayload, wire.MaxDataPayload)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sender{
		cfg:     cfg,
		log:     cfg.Logger,
		hashers: sync.Pool{New: func() any { return xxh3.New() }},
		segs:    make(map[string]*segRef),
	}, nil
}

// Stats returns a snapshot of the counters.
func (s *Sender) Stats() SenderStats { return s.stats.snapshot() }

// Close unmaps the cached segments once no stream uses them.
func (s *Sender) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for path, ref := range s.segs {
		ref.stale = true
		if ref.refs == 0 {
			errs = append(errs, ref.seg.Close())
		}
		delete(s.segs, path)
	}
	return errors.Join(errs...)
}

// Result describes a finished Send or Stream.
type Result struct {
	// Pages and Bytes sent (and, on success, verified by decode).
	Pages int
	Bytes int64
	// Drain is set when the transfer stopped before decode accepted it.
	Drain Drain
}

// Drain reports that a stream stopped early and can write no further byte
// of (TransferID, Epoch) anywhere (I5). Prefill returns it in
// AbortResponse.drained.
type Drain struct {
	TransferID TransferID
	Epoch      uint64
	// Acked: the DRAIN_ACK frame was written to decode's connection.
	Acked bool
}

// PageSource yields the pages of a transfer.
type PageSource interface {
	// Page returns the bytes of page index i (the ticket's PageBytes long).
	Page(i int) []byte
}

// Send pushes every prompt page of t from src and completes the transfer
// with the prompt's token count and first sampled token. It returns once
// decode verified the transfer, or with an error after the stream drained
// (Result.Drain).
func (s *Sender) Send(ctx context.Context, t *Ticket, src PageSource, tokens int64, firstToken int32) (Result, error) {
	st, err := s.Open(ctx, t)
	if err != nil {
		return Result{}, err
	}
	for i := range st.npages {
		if err := st.Push(ctx, i, 0, src.Page(i)); err != nil {
			return Result{Drain: st.Abort()}, err
		}
	}
	return st.Complete(ctx, tokens, firstToken)
}

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
	npages    int
	pageBytes int
	in        frameReader

	// Guarded by wmu, which is held while writing to the connection or
	// into shared memory.
	wmu      sync.Mutex
	out      frameWriter
	progress []int
	hashers  map[int]*xxh3.Hasher
	sums     []uint64
	bytes    int64
	broken   bool     // a frame was written partially: the stream is out of sync
	done     []uint32 // shm pages finished since the last PAGES_DONE
	buf      []byte
	state    streamState

	aborted    atomic.Bool
	causeMu    sync.Mutex
	cause      error
	abortOnce  sync.Once
	drain      Drain
	verdict    chan error // decode's verdict, sent once by readLoop
	readerDone chan struct{}
	closeOnce  sync.Once
	stopCtx    func() bool
}

type streamState int

const (
	streamOpen streamState = iota
	streamCompleting
	streamDone
)

// shmChunk is how much one shm copy step writes before re-checking abort.
const shmChunk = 256 << 10

// Open dials decode, runs the authenticated handshake and returns a Stream
// ready for Push. Nothing is written to decode's pages before decode
// accepted the handshake.
func (s *Sender) Open(ctx context.Context, t *Ticket) (*Stream, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if t.Backend == SHM {
		if err := s.checkShmPath(t.ShmPath); err != nil {
			return nil, err
		}
	}
	hctx, cancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	raw, err := s.cfg.Dial(hctx, "tcp", t.Addr)
	if err != nil {
		return nil, fmt.Errorf("kvtransfer: dial %s: %w", t.Addr, err)
	}
	conn, cs, err := s.handshake(hctx, raw, t)
	if err != nil {
		raw.Close()
		return nil, err
	}
	st := &Stream{
		s: s, t: t, raw: raw, conn: conn,
		npages: t.PromptPages(), pageBytes: int(t.PageBytes),
		in:       frameReader{mac: cs.in},
		out:      frameWriter{mac: cs.out},
		hashers:  make(map[int]*xxh3.Hasher),
		verdict:  make(chan error, 1),
		stopCtx:  func() bool { return false },
		tag:      tagOf(t.Owner),
		progress: make([]int, t.PromptPages()),
		sums:     make([]uint64, t.PromptPages()),
	}
	s.stats.transfers.Add(1)
	if t.Backend == SHM {
		ref, err := s.acquireSegment(t, cs.segmentID)
		if err != nil {
			st.abort(err) // tells decode nothing was written
			return nil, err
		}
		st.seg = ref
	}
	st.readerDone = make(chan struct{})
	go st.readLoop()
	st.stopCtx = context.AfterFunc(ctx, func() { st.abort(ctxAbort(ctx)) })
	return st, nil
}

func ctxAbort(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrAborted, context.Cause(ctx))
}

// handshake wraps raw in TLS if configured and authenticates decode.
func (s *Sender) handshake(ctx context.Context, raw net.Conn, t *Ticket) (net.Conn, clientSession, error) {
	conn := raw
	if d, ok := ctx.Deadline(); ok {
		raw.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if s.cfg.TLS != nil {
		cfg := s.cfg.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(t.Addr)
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, clientSession{}, fmt.Errorf("kvtransfer: tls: %w", err)
		}
		conn = tc
	}
	cs, err := clientHandshake(conn, t)
	if err != nil {
		return nil, cs, fmt.Errorf("kvtransfer: handshake with %s for transfer %v: %w", t.Addr, t.TransferID, err)
	}
	if !stop() { // the deadline callback may already have run
		return nil, cs, fmt.Errorf("kvtransfer: handshake with %s: %w", t.Addr, context.Cause(ctx))
	}
	raw.SetDeadline(time.Time{})
	return conn, cs, nil
}

func (s *Sender) checkShmPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || filepath.Dir(p) != s.cfg.ShmDir {
		return fmt.Errorf("%w: shm path %q is not a file in %s", ErrSegment, p, s.cfg.ShmDir)
	}
	return nil
}

// acquireSegment returns the mapping of t's segment whose ID decode
// announced, reopening the path if the cached mapping is of an older file.
func (s *Sender) acquireSegment(t *Ticket, id [16]byte) (*segRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%w: sender closed", ErrAborted)
	}
	ref := s.segs[t.ShmPath]
	if ref == nil || ref.seg.ID() != id {
		seg, err := OpenSegment(t.ShmPath)
		if err != nil {
			return nil, err
		}
		if seg.ID() != id {
			seg.Close()
			return nil, fmt.Errorf("%w: %s is not the segment decode announced", ErrSegment, t.ShmPath)
		}
		if ref != nil {
			ref.stale = true
			if ref.refs == 0 {
				ref.seg.Close()
			}
		}
		ref = &segRef{seg: seg}
		s.segs[t.ShmPath] = ref
	}
	if int64(ref.seg.PageBytes()) != t.PageBytes {
		return nil, fmt.Errorf("%w: segment pages are %d bytes, ticket %d", ErrSegment, ref.seg.PageBytes(), t.PageBytes)
	}
	for _, p := range t.Pages[:t.PromptPages()] {
		if int(p) >= ref.seg.Pages() {
			return nil, fmt.Errorf("%w: page %d outside segment", ErrSegment, p)
		}
	}
	ref.refs++
	return ref, nil
}

func (s *Sender) releaseSegment(ref *segRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref.refs--
	if ref.stale && ref.refs == 0 {
		ref.seg.Close()
	}
}

// readLoop waits for decode's verdict (RESULT) or ABORT and hands it to
// Complete; a rejection or abort also drains the stream right away.
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
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { st.abort(ctxAbort(ctx)) })
		defer stop()
	}
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.aborted.Load() {
		return st.abortErr()
	}
	switch {
	case st.state != streamOpen:
		return fmt.Errorf("%w: push after complete", ErrProtocol)
	case page < 0 || page >= st.npages:
		return fmt.Errorf("%w: page index %d of %d", ErrProtocol, page, st.npages)
	case offset != st.progress[page]:
		return fmt.Errorf("%w: page %d chunk at %d, expected %d", ErrProtocol, page, offset, st.progress[page])
	case len(data) == 0 || offset+len(data) > st.pageBytes:
		return fmt.Errorf("%w: page %d chunk [%d,+%d) of %d-byte page", ErrProtocol, page, offset, len(data), st.pageBytes)
	}
	st.conn.SetWriteDeadline(time.Now().Add(st.s.cfg.WriteTimeout))
	if st.aborted.Load() { // after the deadline: an abort racing us has interrupted it
		return st.abortErr()
	}
	if st.seg != nil {
		return st.pushSHM(page, offset, data)
	}
	return st.pushTCP(page, offset, data)
}

// sum returns page's running checksum after appending piece at offset.
func (st *Stream) sum(page, offset int, piece []byte) uint64 {
	if offset == 0 && len(piece) == st.pageBytes {
		return wire.Checksum(piece)
	}
	hs := st.hashers[page]
	if hs == nil {
		hs = st.s.hashers.Get().(*xxh3.Hasher)
		hs.Reset()
		st.hashers[page] = hs
	}
	hs.Write(piece)
	sum := hs.Sum64()
	if offset+len(piece) == st.pageBytes {
		delete(st.hashers, page)
		st.s.hashers.Put(hs)
	}
	return sum
}

func (st *Stream) pushTCP(page, offset int, data []byte) error {
	for len(data) > 0 {
		piece := data[:min(len(data), st.s.cfg.MaxFramePayload)]
		h := wire.Header{
			Type: wire.Data, TransferID: st.t.TransferID, Epoch: st.t.Owner.Epoch,
			PageIndex: uint32(page), PageID: st.t.Pages[page],
			Offset: uint32(offset), Checksum: st.sum(page, offset, piece),
		}
		if err := st.sendData(&h, page, offset, piece); err != nil {
			return err
		}
		offset += len(piece)
		data = data[len(piece):]
		st.progress[page] = offset
		if offset == st.pageBytes {
			st.sums[page] = h.Checksum
		}
		st.bytes += int64(len(piece))
		st.s.stats.frames.Add(1)
		st.s.stats.bytes.Add(uint64(len(piece)))
	}
	return nil
}

func (st *Stream) sendData(h *wire.Header, page, offset int, payload []byte) error {
	act := st.s.cfg.Faults.Hit(&faults.Event{Point: faults.SendFrame, Header: h, Page: page, Offset: offset})
	switch act {
	case faults.Drop:
		st.out.seq++ // lost in transit: the sequence number was used
		return nil
	case faults.Corrupt:
		payload = append([]byte(nil), payload...)
		payload[len(payload)/2] ^= 0x5a
	}
	n, err := st.out.write(st.conn, h, payload)
	if err == nil && act == faults.Duplicate {
		n, err = st.out.rewrite(st.conn, payload)
	}
	if err != nil {
		if n > 0 {
			st.broken = true
		}
		if st.aborted.Load() {
			return st.abortErr()
		}
		return fmt.Errorf("%w: writing to decode: %w", ErrIncomplete, err)
	}
	return nil
}

// pushSHM copies data straight into decode's page in shared memory,
// re-checking for abort every shmChunk bytes, and writes the page header
// once the page is complete.
func (st *Stream) pushSHM(page, offset int, data []byte) error {
	id := st.t.Pages[page]
	dst := st.seg.seg.Page(id)[offset : offset+len(data)]
	for done := 0; done < len(data); {
		if st.aborted.Load() {
			return st.abortErr()
		}
		n := min(len(data)-done, shmChunk)
		st.s.cfg.Faults.Hit(&faults.Event{Point: faults.ShmWrite, Page: page, Offset: offset + done})
		copy(dst[done:done+n], data[done:done+n])
		done += n
		st.progress[page] = offset + done
	}
	sum := st.sum(page, offset, data)
	st.bytes += int64(len(data))
	st.s.stats.bytes.Add(uint64(len(data)))
	if offset+len(data) < st.pageBytes {
		return nil
	}
	st.sums[page] = sum
	st.seg.seg.writePageHeader(id, &pageHeader{
		epoch: st.t.Owner.Epoch, transferID: st.t.TransferID, tag: st.tag,
		written: uint64(st.pageBytes), checksum: sum,
	})
	if st.s.cfg.Faults.Hit(&faults.Event{Point: faults.ShmPageDone, Page: page}) == faults.Corrupt {
		p := st.seg.seg.Page(id)
		p[len(p)/2] ^= 0x5a
	}
	st.done = append(st.done, uint32(page))
	if len(st.done)*st.pageBytes < progressBytes {
		return nil
	}
	// Let decode verify these pages while we write the next ones.
	h := wire.Header{Type: wire.PagesDone, TransferID: st.t.TransferID, Epoch: st.t.Owner.Epoch}
	st.buf = wire.AppendPagesDone(st.buf[:0], st.done)
	st.done = st.done[:0]
	if _, err := st.writeControl(&h, st.buf); err != nil {
		return fmt.Errorf("%w: writing PAGES_DONE: %w", ErrIncomplete, err)
	}
	return nil
}

// progressBytes is how much finished shm page data the sender reports at
// a time with PAGES_DONE.
const progressBytes = 1 << 20

// Complete sends the token count, first sampled token and page checksums,
// and waits for decode's verdict. On success every page is verified on
// decode and the stream is closed; otherwise the error wraps decode's reason
// (ErrChecksum, ErrIncomplete, ErrTokenCount, …) and the stream drained.
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
	st.wmu.Lock()
	if st.state == streamCompleting {
		st.state = streamDone
		st.close()
	}
	res := Result{Pages: st.npages, Bytes: st.bytes}
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
		return fmt.Errorf("%w: writing COMPLETE: %w", ErrIncomplete, err)
	}
	st.state = streamCompleting
	return nil
}

// writeControl writes a control frame (under wmu), consulting the fault
// injector; it reports whether the frame was written.
func (st *Stream) writeControl(h *wire.Header, payload []byte) (bool, error) {
	if st.s.cfg.Faults.Hit(&faults.Event{Point: faults.SendFrame, Header: h}) == faults.Drop {
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
			st.conn.SetWriteDeadline(time.Unix(1, 0)) // interrupt a blocked tcp write
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
		st.close()
	})
}

// close releases the connection and segment; called under wmu.
func (st *Stream) close() {
	st.closeOnce.Do(func() {
		st.stopCtx()
		st.raw.Close()
		if st.seg != nil {
			st.s.releaseSegment(st.seg)
		}
		for _, h := range st.hashers {
			st.s.hashers.Put(h)
		}
		clear(st.hashers)
	})
}
