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
	"time"

	"github.com/warden-ai/warden/internal/faults"
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
	// MaxIdleConns is how many connections per decode address are kept
	// after a transfer completed, for later transfers to skip the dial
	// (and TLS handshake). Each transfer still runs the whole handshake and
	// proves its own ticket's token on it. Default 4; negative keeps none.
	MaxIdleConns int
	// IdleConnTimeout is how long an idle connection is kept (default 1m,
	// less than ReceiverConfig.IdleConnTimeout's default).
	IdleConnTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Faults injects faults in tests (see package internal/faults); nil,
	// as in production, injects nothing.
	Faults *faults.Injector
}

// Sender is prefill's end of the data plane. It is safe for concurrent
// use; each transfer is a Stream.
type Sender struct {
	cfg     SenderConfig
	log     *slog.Logger
	stats   senderCounters
	hashers *sync.Pool

	mu     sync.Mutex
	segs   map[string]*segRef
	idle   map[string][]idleConn // by decode address, most recent last
	closed bool
}

// segRef is a mapped segment shared by the streams writing into it.
type segRef struct {
	seg   *Segment
	refs  int
	stale bool // replaced by a newer mapping of the path, or the Sender closed
}

// idleConn is a connection whose last transfer completed cleanly; the
// receiver has already sent the next handshake's challenge on it.
type idleConn struct {
	raw, conn net.Conn
	since     time.Time
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
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = 4
	}
	if cfg.IdleConnTimeout <= 0 {
		cfg.IdleConnTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sender{
		cfg:     cfg,
		log:     cfg.Logger,
		hashers: wire.NewHasherPool(),
		segs:    make(map[string]*segRef),
		idle:    make(map[string][]idleConn),
	}, nil
}

// Stats returns a snapshot of the counters.
func (s *Sender) Stats() SenderStats { return s.stats.snapshot() }

// Close unmaps the cached segments once no stream uses them and closes
// idle connections.
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
	for addr, conns := range s.idle {
		for _, c := range conns {
			c.raw.Close()
		}
		delete(s.idle, addr)
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

// IsZero reports whether d names no transfer: nothing was left to stop.
func (d Drain) IsZero() bool { return d.TransferID == TransferID{} }

// PageSource yields the pages of a transfer.
type PageSource interface {
	// Page returns the bytes of page index i (the ticket's PageBytes long).
	Page(i int) []byte
}

// Send pushes every prompt page of t decode does not hold from src and completes the transfer
// with the prompt's token count and first sampled token. It returns once
// decode verified the transfer, or with an error after the stream drained
// (Result.Drain).
func (s *Sender) Send(ctx context.Context, t *Ticket, src PageSource, tokens int64, firstToken int32) (Result, error) {
	st, err := s.Open(ctx, t)
	if err != nil {
		return Result{}, err
	}
	for i := t.HeldPages; i < st.npages; i++ {
		if err := st.Push(ctx, i, 0, src.Page(i)); err != nil {
			return Result{Drain: st.Abort()}, err
		}
	}
	return st.Complete(ctx, tokens, firstToken)
}

// Open connects to decode (reusing an idle connection when it has one),
// runs the authenticated handshake and returns a Stream ready for Push.
// Nothing is written to decode's pages before decode accepted the
// handshake. The OpenTelemetry span context in ctx, if any (the caller's
// transfer span), travels in the handshake: decode's
// ReceiverConfig.OnTransfer receives it, so its span joins the trace.
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
	raw, conn, cs, err := s.connect(hctx, t)
	if err != nil {
		return nil, err
	}
	st := newStream(s, t, raw, conn, cs)
	s.stats.transfers.Add(1)
	if t.Backend == SHM {
		ref, err := s.acquireSegment(t, cs.segmentID)
		if err != nil {
			st.abort(err) // tells decode nothing was written
			return nil, err
		}
		st.seg = ref
	}
	if inj := s.cfg.Faults; inj != nil {
		inj.Hit(&faults.Event{Point: faults.Opened, Transfer: t.TransferID, Epoch: t.Owner.Epoch})
	}
	st.start(ctx)
	return st, nil
}

// connect returns an authenticated connection for t: an idle one to the
// same address if one still works, else a new one. An idle connection
// that fails before decode's Accept arrived is dropped and the next tried:
// decode accepted nothing on it, so nothing was or will be written. (Decode
// answers a bad proof by closing too, so a sender with a wrong token tries
// once more on a new connection before it gets ErrUnauthenticated.)
func (s *Sender) connect(ctx context.Context, t *Ticket) (raw, conn net.Conn, cs clientSession, err error) {
	for {
		ic, ok := s.takeIdle(t.Addr)
		if !ok {
			break
		}
		cs, err = s.authenticate(ctx, ic.raw, ic.conn, t)
		if err == nil {
			return ic.raw, ic.conn, cs, nil
		}
		ic.raw.Close()
		var ioe errIO
		if !errors.As(err, &ioe) || ctx.Err() != nil {
			return nil, nil, cs, err
		}
	}
	s.stats.dials.Add(1)
	raw, err = s.cfg.Dial(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, nil, cs, fmt.Errorf("kvtransfer: dial %s: %w", t.Addr, err)
	}
	conn = raw
	if s.cfg.TLS != nil {
		cfg := s.cfg.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(t.Addr)
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, nil, cs, fmt.Errorf("kvtransfer: tls: %w", err)
		}
		conn = tc
	}
	cs, err = s.authenticate(ctx, raw, conn, t)
	if err != nil {
		raw.Close()
		return nil, nil, cs, err
	}
	return raw, conn, cs, nil
}

// authenticate runs the handshake for t on conn within ctx.
func (s *Sender) authenticate(ctx context.Context, raw, conn net.Conn, t *Ticket) (clientSession, error) {
	if d, ok := ctx.Deadline(); ok {
		raw.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	cs, err := clientHandshake(conn, t, traceContextOf(ctx))
	if err != nil {
		return cs, fmt.Errorf("kvtransfer: handshake with %s for transfer %v: %w", t.Addr, t.TransferID, err)
	}
	if !stop() { // the deadline callback may already have run
		return cs, fmt.Errorf("kvtransfer: handshake with %s: %w", t.Addr, context.Cause(ctx))
	}
	raw.SetDeadline(time.Time{})
	return cs, nil
}

// takeIdle pops the most recently used idle connection to addr.
func (s *Sender) takeIdle(addr string) (idleConn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireIdle()
	conns := s.idle[addr]
	if len(conns) == 0 {
		return idleConn{}, false
	}
	ic := conns[len(conns)-1]
	s.idle[addr] = conns[:len(conns)-1]
	return ic, true
}

// putIdle keeps a connection whose transfer completed cleanly, or closes
// it if the pool is full or disabled.
func (s *Sender) putIdle(addr string, raw, conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireIdle()
	conns := s.idle[addr]
	if s.closed || len(conns) >= s.cfg.MaxIdleConns {
		raw.Close()
		return
	}
	s.idle[addr] = append(conns, idleConn{raw: raw, conn: conn, since: time.Now()})
}

// expireIdle closes connections idle for longer than IdleConnTimeout;
// called under s.mu.
func (s *Sender) expireIdle() {
	cutoff := time.Now().Add(-s.cfg.IdleConnTimeout)
	for addr, conns := range s.idle {
		keep := conns[:0]
		for _, c := range conns {
			if c.since.Before(cutoff) {
				c.raw.Close()
			} else {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(s.idle, addr)
		} else {
			s.idle[addr] = keep
		}
	}
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
