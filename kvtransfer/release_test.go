package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/faults"
)

// recorder records DeferredRelease callbacks in order.
type recorder struct {
	mu     sync.Mutex
	events []string
	ch     chan string
}

func newRecorder() *recorder { return &recorder{ch: make(chan string, 16)} }

func (r *recorder) fn(name string) func() {
	return func() {
		r.mu.Lock()
		r.events = append(r.events, name)
		r.mu.Unlock()
		r.ch <- name
	}
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func TestDeferredReleaseAckMatchesEpoch(t *testing.T) {
	var outcomes []Outcome
	d := NewDeferredRelease(time.Hour, func(o Outcome, _ time.Duration) { outcomes = append(outcomes, o) })
	defer d.Close()
	rec := newRecorder()
	id := NewTransferID()
	if err := d.Hold(id, 5, rec.fn("release"), rec.fn("quarantine")); err != nil {
		t.Fatal(err)
	}
	if err := d.Hold(id, 5, rec.fn("release"), rec.fn("quarantine")); err == nil {
		t.Error("second Hold of the same (transfer, epoch) accepted")
	}
	if d.Ack(id, 4) {
		t.Error("stale ack (epoch 4) released epoch 5's pages")
	}
	if d.Ack(NewTransferID(), 5) {
		t.Error("ack of another transfer released")
	}
	if got := rec.list(); len(got) != 0 {
		t.Fatalf("callbacks before the ack: %v", got)
	}
	if held, q := d.Pending(); held != 1 || q != 0 {
		t.Errorf("pending %d/%d", held, q)
	}
	if !d.Ack(id, 5) {
		t.Fatal("matching ack did not release")
	}
	if d.Ack(id, 5) {
		t.Error("second ack released again")
	}
	if got := rec.list(); len(got) != 1 || got[0] != "release" {
		t.Errorf("callbacks %v", got)
	}
	d.Immediate(func() {})
	if len(outcomes) != 2 || outcomes[0] != OutcomeDrained || outcomes[1] != OutcomeImmediate {
		t.Errorf("outcomes %v", outcomes)
	}
}

func TestDeferredReleaseTimeoutQuarantines(t *testing.T) {
	outcomes := make(chan Outcome, 4)
	d := NewDeferredRelease(time.Millisecond, func(o Outcome, _ time.Duration) { outcomes <- o })
	defer d.Close()
	rec := newRecorder()
	id := NewTransferID()
	d.Hold(id, 9, rec.fn("release"), rec.fn("quarantine"))
	if ev := <-rec.ch; ev != "quarantine" {
		t.Fatalf("first callback %q", ev)
	}
	if o := <-outcomes; o != OutcomeTimeout {
		t.Errorf("outcome %v", o)
	}
	if held, q := d.Pending(); held != 1 || q != 1 {
		t.Errorf("pending %d/%d", held, q)
	}
	if d.Ack(id, 8) {
		t.Error("stale ack released quarantined pages")
	}
	// A late ack of the right epoch lets the pages leave quarantine.
	if !d.Ack(id, 9) {
		t.Fatal("late ack ignored")
	}
	if got := rec.list(); len(got) != 2 || got[1] != "release" {
		t.Errorf("callbacks %v", got)
	}
	if o := <-outcomes; o != OutcomeLateDrain {
		t.Errorf("outcome %v", o)
	}
	d.Close()
	if err := d.Hold(id, 10, rec.fn("release"), rec.fn("quarantine")); err == nil {
		t.Error("Hold after Close accepted")
	}
}

// stalledShm starts an shm transfer whose writer stalls inside the write
// section of page index 2 (a one-sided write in flight), and returns once
// it is stalled.
func stalledShm(t *testing.T, drainTimeout time.Duration) (*harness, *Ticket, [][]byte, *faults.Injector, chan error) {
	inj := faults.New(faults.StallShmAfter(2 * 4096)) // inside the write of page index 2
	h := newHarness(t, SHM, 16, 4096, harnessOpts{faults: inj, drainTimeout: drainTimeout})
	tk := h.ticket(4*16, 16, 0)
	src := h.randomPages(4)
	sendErr := make(chan error, 1)
	go func() {
		_, err := h.send.Send(context.Background(), tk, slicePages(src), tk.PromptTokens, 0)
		sendErr <- err
	}()
	<-inj.Stalled()
	return h, tk, src, inj, sendErr
}

// TestShmAbortDefersReleaseUntilDrained: decode aborts while prefill's
// write is in flight. The pages are not released while the writer can
// still write; the late write lands, the writer drains and acks, and only
// then are the pages released.
func TestShmAbortDefersReleaseUntilDrained(t *testing.T) {
	h, tk, src, inj, sendErr := stalledShm(t, time.Hour)
	h.sink.fence(tk.TransferID) // the worker bumps the epoch
	released := make(chan []byte, 1)
	h.recv.Abort(tk.TransferID, func() { released <- bytes.Clone(h.page(tk.Pages[2])) }, func() { t.Error("quarantined") })
	if held, _ := h.recv.DeferredRelease().Pending(); held != 1 {
		t.Fatalf("%d holds, want 1", held)
	}
	select {
	case <-released:
		t.Fatal("pages released while a one-sided write was in flight")
	default:
	}
	inj.Release() // the in-flight write lands now
	page := <-released
	if !bytes.Equal(page, src[2]) {
		t.Error("release ran before the late write landed")
	}
	if o := <-h.releases; o.o != OutcomeDrained {
		t.Errorf("outcome %v", o.o)
	}
	// Depending on whether the sender saw decode's ABORT before it went on
	// to COMPLETE, it drains with DRAIN_ACK, or completes and decode
	// rejects the fenced pages; COMPLETE also means drained.
	if err := <-sendErr; !errors.Is(err, ErrAborted) && !errors.Is(err, ErrStaleEpoch) {
		t.Errorf("sender: %v", err)
	}
	if o := h.outcome(); !errors.Is(o.err, ErrAborted) && !errors.Is(o.err, ErrStaleEpoch) {
		t.Errorf("decode outcome: %v", o.err)
	}
	if len(h.sink.writtenCopy()) != 0 {
		t.Error("pages marked written")
	}
}

// TestShmAbortTimeoutQuarantines: the writer stays stalled past the drain
// timeout, so the pages are quarantined; its late ack then releases them.
func TestShmAbortTimeoutQuarantines(t *testing.T) {
	h, tk, src, inj, sendErr := stalledShm(t, time.Millisecond)
	h.sink.fence(tk.TransferID)
	rec := newRecorder()
	var late []byte
	h.recv.Abort(tk.TransferID, func() { late = bytes.Clone(h.page(tk.Pages[2])); rec.fn("release")() }, rec.fn("quarantine"))
	if ev := <-rec.ch; ev != "quarantine" {
		t.Fatalf("first callback %q", ev)
	}
	if o := <-h.releases; o.o != OutcomeTimeout {
		t.Errorf("outcome %v", o.o)
	}
	inj.Release()
	if ev := <-rec.ch; ev != "release" {
		t.Fatalf("second callback %q", ev)
	}
	if !bytes.Equal(late, src[2]) {
		t.Error("released before the late write landed")
	}
	if o := <-h.releases; o.o != OutcomeLateDrain {
		t.Errorf("outcome %v", o.o)
	}
	<-sendErr
}

// TestShmStaleDrainAckDoesNotRelease: a DRAIN_ACK carrying an older epoch
// is dropped and counted; the hold stays.
func TestShmStaleDrainAckDoesNotRelease(t *testing.T) {
	inj := faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Mutate,
		Match: func(e *faults.Event) bool { return e.Frame.Type == "DRAIN_ACK" },
		Edit:  func(h *faults.Frame) { h.Epoch-- }})
	h, tk, st := shmOnePageWritten(t, harnessOpts{faults: inj, drainTimeout: time.Hour})
	h.sink.fence(tk.TransferID)
	released := make(chan struct{}, 1)
	h.recv.Abort(tk.TransferID, func() { released <- struct{}{} }, func() {})
	st.Abort() // the ABORT frame may already have triggered it
	if o := h.outcome(); !errors.Is(o.err, ErrAborted) {
		t.Fatalf("outcome %+v", o)
	}
	waitFor(func() bool { return h.recv.Stats().StaleFrames == 1 })
	select {
	case <-released:
		t.Fatal("stale ack released the pages")
	default:
	}
	if held, _ := h.recv.DeferredRelease().Pending(); held != 1 {
		t.Errorf("%d holds", held)
	}
	if h.recv.DeferredRelease().Ack(tk.TransferID, tk.Owner.Epoch-1) {
		t.Error("stale ack released")
	}
	if !h.recv.DeferredRelease().Ack(tk.TransferID, tk.Owner.Epoch) {
		t.Error("current ack did not release")
	}
	<-released
}

// TestShmSenderDrainsFirst: prefill aborted first (the gateway told it);
// its DRAIN_ACK arrived before decode's Abort, which then releases at once.
func TestShmSenderDrainsFirst(t *testing.T) {
	h, tk, st := shmOnePageWritten(t, harnessOpts{drainTimeout: time.Hour})
	ctx := context.Background()
	d := st.Abort()
	if !d.Acked || d.TransferID != tk.TransferID || d.Epoch != tk.Owner.Epoch {
		t.Errorf("drain %+v", d)
	}
	if err := st.Push(ctx, 1, 0, h.randomPages(1)[0]); !errors.Is(err, ErrAborted) {
		t.Errorf("push after abort: %v", err)
	}
	if o := h.outcome(); !errors.Is(o.err, ErrAborted) {
		t.Fatalf("outcome %+v", o)
	}
	released := false
	h.sink.fence(tk.TransferID)
	h.recv.Abort(tk.TransferID, func() { released = true }, func() { t.Error("quarantined") })
	if !released {
		t.Error("drained transfer not released at once")
	}
	if o := <-h.releases; o.o != OutcomeImmediate {
		t.Errorf("outcome %v", o.o)
	}
}

// TestDecodeAbortStopsShmSender: decode's ABORT frame makes an idle
// sender drain and ack on its own; the pages are released on the ack.
func TestDecodeAbortStopsShmSender(t *testing.T) {
	h, tk, st := shmOnePageWritten(t, harnessOpts{drainTimeout: time.Hour})
	ctx := context.Background()
	h.sink.fence(tk.TransferID)
	released := make(chan struct{})
	h.recv.Abort(tk.TransferID, func() { close(released) }, func() { t.Error("quarantined") })
	<-released
	if o := <-h.releases; o.o != OutcomeDrained {
		t.Errorf("outcome %v", o.o)
	}
	if err := st.Push(ctx, 1, 0, h.randomPages(1)[0]); !errors.Is(err, ErrAborted) {
		t.Errorf("push after decode abort: %v", err)
	}
	if _, err := st.Complete(ctx, tk.PromptTokens, 0); !errors.Is(err, ErrAborted) {
		t.Errorf("complete after decode abort: %v", err)
	}
}

// TestTCPAbortIsImmediate: with tcp decode is the only writer, so Abort
// stops it and releases at once; nothing of the transfer touches a page
// afterwards even though the sender keeps pushing.
func TestTCPAbortIsImmediate(t *testing.T) {
	inj := faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Stall,
		Match: func(e *faults.Event) bool { return e.Frame.Type == "DATA" && e.Page == 2 }})
	h := newHarness(t, TCP, 16, 4096, harnessOpts{faults: inj, drainTimeout: time.Hour})
	tk := h.ticket(4*16, 16, 0)
	src := h.randomPages(4)
	sendErr := make(chan error, 1)
	go func() {
		_, err := h.send.Send(context.Background(), tk, slicePages(src), tk.PromptTokens, 0)
		sendErr <- err
	}()
	<-inj.Stalled()
	waitFor(func() bool { return h.recv.Stats().Frames == 2 })
	h.sink.fence(tk.TransferID)
	released := false
	h.recv.Abort(tk.TransferID, func() { released = true }, func() { t.Error("quarantined") })
	if !released {
		t.Fatal("tcp abort not released at once")
	}
	if o := <-h.releases; o.o != OutcomeImmediate {
		t.Errorf("outcome %v", o.o)
	}
	before := h.sink.pageDatas.Load()
	page2 := bytes.Clone(h.page(tk.Pages[2]))
	inj.Release()
	if err := <-sendErr; err == nil {
		t.Error("send succeeded after decode aborted")
	}
	if o := h.outcome(); !errors.Is(o.err, ErrAborted) {
		t.Errorf("decode outcome %+v: %v", o, o.err)
	}
	if n := h.sink.pageDatas.Load(); n != before {
		t.Errorf("%d page accesses after abort", n-before)
	}
	if !bytes.Equal(h.page(tk.Pages[2]), page2) {
		t.Error("page written after abort")
	}
}

// TestAbortBeforeConnect: a transfer aborted before prefill connected is
// released at once and can no longer be opened.
func TestAbortBeforeConnect(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 8, 1024, harnessOpts{drainTimeout: time.Hour})
			tk := h.ticket(8, 4, 0)
			h.sink.fence(tk.TransferID)
			released := false
			h.recv.Abort(tk.TransferID, func() { released = true }, nil)
			if !released {
				t.Fatal("not released")
			}
			if _, err := h.send.Open(context.Background(), tk); err == nil {
				t.Fatal("aborted transfer opened")
			}
			if n := h.sink.pageDatas.Load(); n != 0 {
				t.Errorf("PageData called %d times", n)
			}
		})
	}
}

// TestSenderCancelWhileBlocked: decode stops reading (its CheckWrite
// blocks), the sender's writes back up; cancelling the context stops the
// sender promptly and reports the drain.
func TestSenderCancelWhileBlocked(t *testing.T) {
	h := newHarness(t, TCP, 64, 256<<10, harnessOpts{})
	h.sink.blockCheck = make(chan struct{})
	tk := h.ticket(64*16, 16, 0)
	page := make([]byte, 256<<10)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := h.send.Open(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	pushErr := make(chan error, 1)
	go func() {
		for i := range 64 {
			if err := st.Push(ctx, i, 0, page); err != nil {
				pushErr <- err
				return
			}
		}
		_, err := st.Complete(ctx, tk.PromptTokens, 0)
		pushErr <- err
	}()
	<-h.sink.blocked
	cancel()
	err = <-pushErr
	if !errors.Is(err, ErrAborted) || !errors.Is(err, context.Canceled) {
		t.Errorf("push: %v", err)
	}
	if d := st.Abort(); d.TransferID != tk.TransferID || d.Epoch != tk.Owner.Epoch {
		t.Errorf("drain %+v", d)
	}
	close(h.sink.blockCheck)
	if o := h.outcome(); o.err == nil {
		t.Error("transfer completed after the sender was cancelled")
	}
}

// dropDrainAck loses the sender's DRAIN_ACK: the stream drains and closes
// its connection, but decode never reads the ack.
func dropDrainAck() *faults.Injector {
	return faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Drop,
		Match: func(e *faults.Event) bool { return e.Frame.Type == "DRAIN_ACK" }})
}

// TestShmWriterDrainedReleasesHold: the sender's DRAIN_ACK is lost with
// its connection after decode parked the release, so the hold would only
// time out. WriterDrained for another epoch or transfer releases nothing;
// for the transfer's (id, epoch) — the drain the sender reported — it
// releases through the same ack (outcome drained), once.
func TestShmWriterDrainedReleasesHold(t *testing.T) {
	inj := dropDrainAck()
	h, tk, st := shmOnePageWritten(t, harnessOpts{faults: inj, drainTimeout: time.Hour})
	h.sink.fence(tk.TransferID)
	released := make(chan struct{}, 1)
	h.recv.Abort(tk.TransferID, func() { released <- struct{}{} }, func() { t.Error("quarantined") })
	d := st.Abort() // the ABORT frame may already have triggered it
	if d.Acked || d.TransferID != tk.TransferID || d.Epoch != tk.Owner.Epoch {
		t.Fatalf("drain %+v, want an unacked drain of the transfer", d)
	}
	if o := h.outcome(); !errors.Is(o.err, ErrAborted) {
		t.Fatalf("outcome %+v", o)
	}
	if inj.Fired(0) != 1 {
		t.Fatalf("DRAIN_ACK dropped %d times", inj.Fired(0))
	}
	waitFor(func() bool { return h.recv.Stats().Active == 0 }) // the session ended: only the hold is left
	if h.recv.WriterDrained(tk.TransferID, tk.Owner.Epoch+1) || h.recv.WriterDrained(NewTransferID(), tk.Owner.Epoch) {
		t.Error("a drain of another epoch or transfer was applied")
	}
	select {
	case <-released:
		t.Fatal("released by a drain of another epoch or transfer")
	default:
	}
	if held, _ := h.recv.DeferredRelease().Pending(); held != 1 {
		t.Fatalf("%d holds, want 1", held)
	}
	if !h.recv.WriterDrained(d.TransferID, d.Epoch) {
		t.Fatal("the sender's drain was not applied")
	}
	<-released
	if o := <-h.releases; o.o != OutcomeDrained {
		t.Errorf("outcome %v", o.o)
	}
	if h.recv.WriterDrained(d.TransferID, d.Epoch) {
		t.Error("a second relay of the drain was applied")
	}
	if s := h.recv.Stats(); s.DrainRelays != 1 || s.DrainAcks != 0 {
		t.Errorf("stats %+v, want one drain relay and no drain ack", s)
	}
}

// TestShmWriterDrainedBeforeAbort: the session ended without the drain
// ack (lost with the connection) before decode tore the transfer down;
// the relayed drain marks the transfer drained, so Abort releases at once
// instead of holding pages for an ack that cannot come.
func TestShmWriterDrainedBeforeAbort(t *testing.T) {
	h, tk, st := shmOnePageWritten(t, harnessOpts{faults: dropDrainAck(), drainTimeout: time.Hour})
	d := st.Abort()
	if o := h.outcome(); !errors.Is(o.err, ErrIncomplete) {
		t.Fatalf("outcome %+v, want the connection lost", o)
	}
	if !h.recv.WriterDrained(d.TransferID, d.Epoch) {
		t.Fatal("the drain of a tracked transfer was not applied")
	}
	released := false
	h.sink.fence(tk.TransferID)
	h.recv.Abort(tk.TransferID, func() { released = true }, func() { t.Error("quarantined") })
	if !released {
		t.Error("relayed-drained transfer not released at once")
	}
	if o := <-h.releases; o.o != OutcomeImmediate {
		t.Errorf("outcome %v", o.o)
	}
	if held, _ := h.recv.DeferredRelease().Pending(); held != 0 {
		t.Errorf("%d holds left", held)
	}
}

// shmOnePageWritten opens an shm transfer of two pages on a fresh harness
// with opts and writes its first page: a transfer a writer is in the
// middle of.
func shmOnePageWritten(t *testing.T, opts harnessOpts) (*harness, *Ticket, *Stream) {
	t.Helper()
	h := newHarness(t, SHM, 16, 4096, opts)
	tk := h.ticket(2*16, 16, 0)
	ctx := context.Background()
	st, err := h.send.Open(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Push(ctx, 0, 0, h.randomPages(1)[0]); err != nil {
		t.Fatal(err)
	}
	return h, tk, st
}
