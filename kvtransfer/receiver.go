package kvtransfer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// The receiver is split by concern:
//   - receiver.go: configuration, Serve, Close, Stats;
//   - receiver_conn.go: one connection — handshake, admission, reuse;
//   - receiver_session.go: one admitted transfer's frames and verdict;
//   - receiver_tcp.go and receiver_shm.go: the two backends' page paths;
//   - receiver_abort.go: Abort and the deferred release of shm pages, and
//     WriterDrained, the drain ack relayed over the control plane.

// readBuffer is the read buffer of a tcp session.
const readBuffer = 64 << 10

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
	// IdleConnTimeout is how long a connection whose transfer completed
	// waits for the sender's next transfer before the receiver closes it
	// (default 2m; senders keep idle connections for less, see
	// SenderConfig.IdleConnTimeout).
	IdleConnTimeout time.Duration
	// DrainTimeout is how long pages of an aborted shm transfer wait for
	// the sender's drain ack before they are quarantined (default 30s).
	DrainTimeout time.Duration
	// WriteTimeout bounds a write of RESULT or ABORT (default 5s).
	WriteTimeout time.Duration
	// MaxConns bounds concurrent connections, idle ones included; more are
	// closed at once (default 1024).
	MaxConns int
	// OnRelease is told how each aborted transfer's pages were released
	// (warden_decode_deferred_kv_release_total{outcome}). Optional.
	OnRelease func(o Outcome, waited time.Duration)
	// OnTransfer, if set, observes every transfer whose handshake the
	// receiver accepted, e.g. to trace it: it is called once the Accept
	// went out, with the ticket and the span context the sender passed to
	// Sender.Open (remote; invalid when the sender had none), and returns
	// the function the receiver calls exactly once, right after
	// Sink.Complete (with the Completion and nil) or Sink.Fail (with a zero
	// Completion and the error). Both run on the connection's goroutine
	// and must not block or call back into the Receiver.
	OnTransfer func(t *Ticket, sender trace.SpanContext) (end func(Completion, error))
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Faults injects faults in tests (see package internal/faults); nil,
	// as in production, injects nothing.
	Faults *faults.Injector
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
	// several frames; readers the read buffers of tcp sessions.
	hashers *sync.Pool
	readers sync.Pool

	mu        sync.Mutex
	closed    bool
	transfers map[TransferID]*rtransfer
	conns     map[net.Conn]struct{}
	listeners map[net.Listener]struct{}
	wg        sync.WaitGroup
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
	if cfg.IdleConnTimeout <= 0 {
		cfg.IdleConnTimeout = 2 * time.Minute
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
		hashers:   wire.NewHasherPool(),
		readers:   sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBuffer) }},
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
