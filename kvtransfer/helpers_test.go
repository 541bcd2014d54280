package kvtransfer

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/internal/faults"
)

// memSink is an in-memory Sink: a page slab, a ticket table and fencing.
type memSink struct {
	slab      []byte
	pageBytes int

	mu      sync.Mutex
	tickets map[TransferID]*Ticket
	live    map[TransferID]bool
	fenced  map[TransferID]bool
	written map[int32]int
	// blockCheck, if set, is received from before CheckWrite answers.
	blockCheck chan struct{}
	blocked    chan struct{} // closed when CheckWrite first blocks
	blockOnce  sync.Once

	checkWrites, pageDatas atomic.Int64
	outcomes               chan outcome
}

type outcome struct {
	t   *Ticket
	c   Completion
	err error
}

func newMemSink(slab []byte, pageBytes int) *memSink {
	return &memSink{
		slab: slab, pageBytes: pageBytes,
		tickets:  make(map[TransferID]*Ticket),
		live:     make(map[TransferID]bool),
		fenced:   make(map[TransferID]bool),
		written:  make(map[int32]int),
		outcomes: make(chan outcome, 64),
		blocked:  make(chan struct{}),
	}
}

func (m *memSink) add(t *Ticket) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tickets[t.TransferID] = t
	m.live[t.TransferID] = true
}

// fence models the worker's abort: bump the epoch so the old one can no
// longer write, and drop the ticket.
func (m *memSink) fence(id TransferID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fenced[id] = true
	m.live[id] = false
}

func (m *memSink) Lookup(id TransferID) (*Ticket, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tickets[id]
	return t, t != nil && m.live[id]
}

var errFenced = errors.New("memsink: page fenced")

func (m *memSink) CheckWrite(t *Ticket, page int32) error {
	m.checkWrites.Add(1)
	if m.blockCheck != nil {
		m.blockOnce.Do(func() { close(m.blocked) })
		<-m.blockCheck
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced[t.TransferID] {
		return errFenced
	}
	return nil
}

func (m *memSink) PageData(page int32) []byte {
	m.pageDatas.Add(1)
	off := int(page) * m.pageBytes
	return m.slab[off : off+m.pageBytes]
}

func (m *memSink) Written(t *Ticket, page int32, slots int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced[t.TransferID] {
		return errFenced
	}
	m.written[page] = slots
	return nil
}

func (m *memSink) Complete(t *Ticket, c Completion) {
	m.mu.Lock()
	m.live[t.TransferID] = false
	m.mu.Unlock()
	m.outcomes <- outcome{t: t, c: c}
}

func (m *memSink) Fail(t *Ticket, err error) {
	m.mu.Lock()
	m.live[t.TransferID] = false
	m.mu.Unlock()
	m.outcomes <- outcome{t: t, err: err}
}

func (m *memSink) writtenCopy() map[int32]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int32]int, len(m.written))
	for k, v := range m.written {
		out[k] = v
	}
	return out
}

var _ Sink = (*memSink)(nil)

// harness is a receiver on loopback with a sink over a page slab (a shared
// memory segment for shm) and a sender.
type harness struct {
	t         testing.TB
	backend   Backend
	pages     int
	pageBytes int
	seg       *Segment
	sink      *memSink
	recv      *Receiver
	send      *Sender
	addr      string
	dir       string
	rng       *mrand.Rand
	free      []int // pages not yet in a ticket, random order
	releases  chan outcomeRelease
}

type outcomeRelease struct {
	o      Outcome
	waited time.Duration
}

type harnessOpts struct {
	faults       *faults.Injector // sender's
	recvFaults   *faults.Injector
	drainTimeout time.Duration
	maxFrame     int
	// recvIdleConn is the receiver's IdleConnTimeout; maxIdle and
	// sendIdleConn the sender's MaxIdleConns and IdleConnTimeout.
	recvIdleConn, sendIdleConn time.Duration
	maxIdle                    int
	// tls wraps both ends in TLS with a throwaway certificate.
	tls bool
	// segPath places the shm segment (default: in a temporary directory).
	segPath string
	// onTransfer is the receiver's OnTransfer hook.
	onTransfer func(*Ticket, trace.SpanContext) func(Completion, error)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHarness(tb testing.TB, backend Backend, pages, pageBytes int, o harnessOpts) *harness {
	tb.Helper()
	h := &harness{
		t: tb, backend: backend, pages: pages, pageBytes: pageBytes,
		dir: tb.TempDir(), rng: mrand.New(mrand.NewPCG(1, 2)),
		releases: make(chan outcomeRelease, 64),
	}
	var slab []byte
	if backend == SHM {
		path := filepath.Join(h.dir, "warden-test-kv")
		if o.segPath != "" {
			path, h.dir = o.segPath, filepath.Dir(o.segPath)
		}
		seg, err := CreateSegment(path, pages, pageBytes)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { seg.Close() })
		h.seg, slab = seg, seg.Data()
	} else {
		slab = make([]byte, pages*pageBytes)
	}
	h.sink = newMemSink(slab, pageBytes)
	var serverTLS, clientTLS *tls.Config
	if o.tls {
		serverTLS, clientTLS = testTLS(tb)
	}
	recv, err := NewReceiver(ReceiverConfig{
		Sink: h.sink, Segment: h.seg, DrainTimeout: o.drainTimeout, Logger: quietLogger(), TLS: serverTLS,
		IdleConnTimeout: o.recvIdleConn, Faults: o.recvFaults, OnTransfer: o.onTransfer,
		OnRelease: func(oc Outcome, w time.Duration) { h.releases <- outcomeRelease{oc, w} },
	})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- recv.Serve(ctx, ln) }()
	send, err := NewSender(SenderConfig{ShmDir: h.dir, Faults: o.faults, MaxFramePayload: o.maxFrame, Logger: quietLogger(), TLS: clientTLS,
		MaxIdleConns: o.maxIdle, IdleConnTimeout: o.sendIdleConn})
	if err != nil {
		tb.Fatal(err)
	}
	h.recv, h.send = recv, send
	tb.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
		recv.Close()
		send.Close()
	})
	return h
}

// ticket reserves distinct random pages (extra beyond the prompt) and
// registers the ticket with the sink.
func (h *harness) ticket(promptTokens int64, pageTokens int32, extra int) *Ticket {
	n := int((promptTokens+int64(pageTokens)-1)/int64(pageTokens)) + extra
	if h.free == nil {
		h.free = h.rng.Perm(h.pages)
	}
	if n > len(h.free) {
		h.t.Fatalf("harness out of pages")
	}
	pages := make([]int32, n)
	for i, p := range h.free[:n] {
		pages[i] = int32(p)
	}
	h.free = h.free[n:]
	t := &Ticket{
		TransferID: NewTransferID(),
		Owner:      Owner{Tenant: "tenant-a", Request: "req-" + NewTransferID().String()[:8], Epoch: 7},
		Pages:      pages, PageTokens: pageTokens, PromptTokens: promptTokens,
		PageBytes: int64(h.pageBytes), AuthToken: NewAuthToken(),
		Addr: h.addr, Backend: h.backend,
	}
	if h.backend == SHM {
		t.ShmPath = h.seg.Path()
	}
	h.sink.add(t)
	return t
}

// randomPages returns n pages of random bytes.
func (h *harness) randomPages(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, h.pageBytes)
		for j := range out[i] {
			out[i][j] = byte(h.rng.Uint32())
		}
	}
	return out
}

func (h *harness) page(id int32) []byte {
	off := int(id) * h.pageBytes
	return h.sink.slab[off : off+h.pageBytes]
}

// outcome waits for the sink's next Complete or Fail.
func (h *harness) outcome() outcome {
	h.t.Helper()
	return <-h.sink.outcomes
}

// noMoreOutcomes asserts no further Complete or Fail arrived.
func (h *harness) noMoreOutcomes() {
	h.t.Helper()
	select {
	case o := <-h.sink.outcomes:
		h.t.Fatalf("unexpected extra outcome: %+v", o)
	default:
	}
}

type slicePages [][]byte

func (s slicePages) Page(i int) []byte { return s[i] }

// waitFor polls cond until it holds; the test's own timeout bounds it.
func waitFor(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

// testTLS returns server and client configs around a throwaway self-signed
// certificate for 127.0.0.1.
func testTLS(tb testing.TB) (server, client *tls.Config) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kvtransfer-test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13}
	client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	return server, client
}

// fakeConn is a net.Conn that reads from a byte slice and discards
// writes, for fuzzing the protocol state machines without sockets.
type fakeConn struct {
	r      *bytes.Reader
	closed atomic.Bool
}

func newFakeConn(b []byte) *fakeConn { return &fakeConn{r: bytes.NewReader(b)} }

func (c *fakeConn) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.r.Read(p)
}
func (c *fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fakeConn) Close() error                     { c.closed.Store(true); return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }
