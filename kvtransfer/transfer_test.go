package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/warden-ai/warden/internal/faults"
)

var backends = []Backend{TCP, SHM}

// TestRoundTripLayered pushes pages layer by layer (every page's layer 0,
// then every page's layer 1, …) and checks every byte arrived, every page
// was marked written with the right slot count, pages beyond the prompt
// were not touched, and Complete was called exactly once.
func TestRoundTripLayered(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			const pageBytes, layers = 8192, 4
			h := newHarness(t, b, 64, pageBytes, harnessOpts{})
			tk := h.ticket(10*16+5, 16, 3) // 11 pages, the last partly filled
			src := h.randomPages(tk.PromptPages())
			before := make(map[int32][]byte)
			for _, p := range tk.Pages[tk.PromptPages():] {
				before[p] = bytes.Clone(h.page(p))
			}
			ctx := context.Background()
			st, err := h.send.Open(ctx, tk)
			if err != nil {
				t.Fatal(err)
			}
			layer := pageBytes / layers
			for l := range layers {
				for i := range src {
					if err := st.Push(ctx, i, l*layer, src[i][l*layer:(l+1)*layer]); err != nil {
						t.Fatalf("push page %d layer %d: %v", i, l, err)
					}
				}
			}
			res, err := st.Complete(ctx, tk.PromptTokens, 4242)
			if err != nil {
				t.Fatal(err)
			}
			if res.Pages != 11 || res.Bytes != 11*pageBytes {
				t.Errorf("result %+v", res)
			}
			o := h.outcome()
			if o.err != nil {
				t.Fatalf("Fail: %v", o.err)
			}
			want := Completion{Tokens: 165, FirstToken: 4242, Pages: 11, Bytes: 11 * pageBytes}
			if o.c != want || o.t.TransferID != tk.TransferID {
				t.Errorf("completion %+v, want %+v", o.c, want)
			}
			for i, p := range tk.Pages[:tk.PromptPages()] {
				if !bytes.Equal(h.page(p), src[i]) {
					t.Errorf("page index %d (id %d) differs", i, p)
				}
			}
			for p, b := range before {
				if !bytes.Equal(h.page(p), b) {
					t.Errorf("page %d beyond the prompt was written", p)
				}
			}
			written := h.sink.writtenCopy()
			if len(written) != 11 {
				t.Errorf("%d pages written, want 11", len(written))
			}
			for i, p := range tk.Pages[:11] {
				want := 16
				if i == 10 {
					want = 5
				}
				if written[p] != want {
					t.Errorf("page %d: %d slots written, want %d", p, written[p], want)
				}
			}
			h.noMoreOutcomes()
			if s := h.recv.Stats(); s.Completed != 1 || s.Failed != 0 || s.Transfers != 1 {
				t.Errorf("receiver stats %+v", s)
			}
		})
	}
}

// TestSendSplitsFrames sends whole pages through Send with frames smaller
// than a page (tcp) and checks the bytes.
func TestSendSplitsFrames(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 32, 20000, harnessOpts{maxFrame: 3000})
			tk := h.ticket(8*32, 32, 0)
			src := h.randomPages(8)
			if _, err := h.send.Send(context.Background(), tk, slicePages(src), tk.PromptTokens, 1); err != nil {
				t.Fatal(err)
			}
			if o := h.outcome(); o.err != nil || o.c.Pages != 8 {
				t.Fatalf("outcome %+v", o)
			}
			for i, p := range tk.Pages {
				if !bytes.Equal(h.page(p), src[i]) {
					t.Errorf("page %d differs", i)
				}
			}
			if b == TCP {
				if s := h.recv.Stats(); s.Frames != 8*7 || s.Bytes != 8*20000 {
					t.Errorf("stats %+v, want 56 frames", s)
				}
			}
		})
	}
}

// TestConcurrentTransfers runs transfers of both backends in parallel
// into one receiver and checks each landed in its own pages.
func TestConcurrentTransfers(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			const n = 8
			h := newHarness(t, b, n*4, 4096, harnessOpts{})
			tickets := make([]*Ticket, n)
			srcs := make([][][]byte, n)
			for i := range n {
				tickets[i] = h.ticket(4*8, 8, 0)
				srcs[i] = h.randomPages(4)
			}
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					_, errs[i] = h.send.Send(context.Background(), tickets[i], slicePages(srcs[i]), 32, int32(i))
				})
			}
			wg.Wait()
			firsts := map[int32]bool{}
			for range n {
				o := h.outcome()
				if o.err != nil {
					t.Fatalf("Fail: %v", o.err)
				}
				firsts[o.c.FirstToken] = true
			}
			if len(firsts) != n {
				t.Errorf("first tokens %v", firsts)
			}
			for i, tk := range tickets {
				if errs[i] != nil {
					t.Errorf("transfer %d: %v", i, errs[i])
				}
				for j, p := range tk.Pages {
					if !bytes.Equal(h.page(p), srcs[i][j]) {
						t.Errorf("transfer %d page %d differs", i, j)
					}
				}
			}
		})
	}
}

// TestTransferFailures injects one fault per case and checks that decode
// fails the transfer with the right error, never completes it, marks no
// page written, and that the sender sees the same reason.
func TestTransferFailures(t *testing.T) {
	dataFrame := func(page int) func(*faults.Event) bool {
		return func(e *faults.Event) bool { return e.Frame.Type == "DATA" && e.Page == page }
	}
	cases := []struct {
		name    string
		backend Backend
		rules   []faults.Rule
		// skip lists page indices left unpushed; tokens adds to the count.
		skip   []int
		tokens int64
		want   error
		check  func(t *testing.T, s ReceiverStats)
	}{
		{name: "corrupt frame", backend: TCP, want: ErrChecksum,
			rules: []faults.Rule{{Point: faults.SendFrame, Match: dataFrame(2), Action: faults.Corrupt}},
			check: func(t *testing.T, s ReceiverStats) {
				if s.ChecksumFailures != 1 {
					t.Errorf("checksum failures %d", s.ChecksumFailures)
				}
			}},
		{name: "duplicate frame", backend: TCP, want: ErrDuplicate,
			rules: []faults.Rule{{Point: faults.SendFrame, Match: dataFrame(1), Action: faults.Duplicate}},
			check: func(t *testing.T, s ReceiverStats) {
				if s.DuplicateFrames != 1 {
					t.Errorf("duplicate frames %d", s.DuplicateFrames)
				}
			}},
		{name: "dropped frame", backend: TCP, want: ErrIncomplete,
			rules: []faults.Rule{{Point: faults.SendFrame, Match: dataFrame(1), Action: faults.Drop}}},
		{name: "dropped last frame", backend: TCP, want: ErrIncomplete,
			rules: []faults.Rule{{Point: faults.SendFrame, Match: dataFrame(3), Action: faults.Drop}}},
		{name: "old epoch frame", backend: TCP, want: ErrIncomplete,
			rules: []faults.Rule{{Point: faults.SendFrame, Match: dataFrame(2), Action: faults.Mutate,
				Edit: func(h *faults.Frame) { h.Epoch-- }}},
			check: func(t *testing.T, s ReceiverStats) {
				if s.StaleFrames != 1 {
					t.Errorf("stale frames %d", s.StaleFrames)
				}
			}},
		{name: "frame of another transfer", backend: TCP, want: ErrIncomplete,
			rules: []faults.Rule{{Point: faults.SendFrame, Match: dataFrame(0), Action: faults.Mutate,
				Edit: func(h *faults.Frame) { h.TransferID[0] ^= 1 }}},
			check: func(t *testing.T, s ReceiverStats) {
				if s.UnknownFrames != 1 {
					t.Errorf("unknown frames %d", s.UnknownFrames)
				}
			}},
		{name: "wrong destination page", backend: TCP, want: ErrProtocol,
			rules: []faults.Rule{{Point: faults.SendFrame, Match: dataFrame(1), Action: faults.Mutate,
				Edit: func(h *faults.Frame) { h.PageID++ }}}},
		{name: "missing page", backend: TCP, skip: []int{2}, want: ErrIncomplete},
		{name: "token count", backend: TCP, tokens: 1, want: ErrTokenCount},
		{name: "short token count", backend: TCP, tokens: -20, want: ErrTokenCount},
		{name: "corrupt after checksum", backend: SHM, want: ErrChecksum,
			rules: []faults.Rule{{Point: faults.ShmPageDone, Match: func(e *faults.Event) bool { return e.Page == 1 }, Action: faults.Corrupt}},
			check: func(t *testing.T, s ReceiverStats) {
				if s.ChecksumFailures != 1 {
					t.Errorf("checksum failures %d", s.ChecksumFailures)
				}
			}},
		{name: "missing page", backend: SHM, skip: []int{3}, want: ErrIncomplete},
		{name: "token count", backend: SHM, tokens: 1, want: ErrTokenCount},
	}
	for _, tc := range cases {
		t.Run(string(tc.backend)+"/"+tc.name, func(t *testing.T) {
			inj := faults.New(tc.rules...)
			h := newHarness(t, tc.backend, 16, 4096, harnessOpts{faults: inj})
			tk := h.ticket(4*16, 16, 0)
			src := h.randomPages(4)
			ctx := context.Background()
			st, err := h.send.Open(ctx, tk)
			if err != nil {
				t.Fatal(err)
			}
			var pushErr error
			for i := range 4 {
				if slices.Contains(tc.skip, i) {
					continue
				}
				if pushErr = st.Push(ctx, i, 0, src[i]); pushErr != nil {
					break // decode already rejected the transfer
				}
			}
			var res Result
			if pushErr == nil {
				res, err = st.Complete(ctx, tk.PromptTokens+tc.tokens, 0)
			} else {
				res.Drain, err = st.Abort(), pushErr
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("sender error %v, want %v", err, tc.want)
			}
			if res.Drain.TransferID != tk.TransferID || res.Drain.Epoch != tk.Owner.Epoch {
				t.Errorf("drain %+v", res.Drain)
			}
			o := h.outcome()
			if !errors.Is(o.err, tc.want) {
				t.Fatalf("decode outcome %+v, want Fail(%v)", o, tc.want)
			}
			h.noMoreOutcomes()
			if w := h.sink.writtenCopy(); len(w) != 0 {
				t.Errorf("pages marked written on failure: %v", w)
			}
			s := h.recv.Stats()
			if s.Completed != 0 || s.Failed != 1 {
				t.Errorf("stats %+v", s)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// TestStaleCompleteDropped sends COMPLETE with an old epoch: it is dropped
// and counted, the transfer never completes, and fails once the sender
// gives up.
func TestStaleCompleteDropped(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			inj := faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Mutate,
				Match: func(e *faults.Event) bool { return e.Frame.Type == "COMPLETE" },
				Edit:  func(h *faults.Frame) { h.Epoch-- }})
			h := newHarness(t, b, 8, 1024, harnessOpts{faults: inj})
			tk := h.ticket(2*4, 4, 0)
			st, err := h.send.Open(context.Background(), tk)
			if err != nil {
				t.Fatal(err)
			}
			src := h.randomPages(2)
			for i := range 2 {
				if err := st.Push(context.Background(), i, 0, src[i]); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, err := st.Complete(ctx, tk.PromptTokens, 0); done <- err }()
			waitFor(func() bool { return h.recv.Stats().StaleFrames == 1 })
			cancel() // no verdict will come: give up
			if err := <-done; !errors.Is(err, ErrAborted) || !errors.Is(err, context.Canceled) {
				t.Errorf("Complete: %v", err)
			}
			if o := h.outcome(); !errors.Is(o.err, ErrAborted) {
				t.Errorf("outcome %+v", o)
			}
			if len(h.sink.writtenCopy()) != 0 {
				t.Error("pages marked written")
			}
		})
	}
}

// TestFencedMidTransfer fences the transfer (the worker bumped the epoch)
// after two pages: the next frame is refused by CheckWrite before any byte
// is copied and the transfer fails with ErrStaleEpoch.
func TestFencedMidTransfer(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 16, 4096, harnessOpts{})
			tk := h.ticket(4*16, 16, 0)
			src := h.randomPages(4)
			ctx := context.Background()
			st, err := h.send.Open(ctx, tk)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := st.Push(ctx, i, 0, src[i]); err != nil {
					t.Fatal(err)
				}
			}
			if b == TCP {
				waitFor(func() bool { return h.recv.Stats().Frames == 2 })
			}
			h.sink.fence(tk.TransferID)
			before := bytes.Clone(h.page(tk.Pages[2]))
			var perr error
			for i := 2; i < 4 && perr == nil; i++ {
				perr = st.Push(ctx, i, 0, src[i])
			}
			if perr == nil {
				_, err = st.Complete(ctx, tk.PromptTokens, 0)
			} else {
				st.Abort()
				err = perr
			}
			if !errors.Is(err, ErrStaleEpoch) {
				t.Errorf("sender: %v", err)
			}
			if o := h.outcome(); !errors.Is(o.err, ErrStaleEpoch) {
				t.Fatalf("outcome %+v", o)
			}
			if b == TCP {
				if !bytes.Equal(h.page(tk.Pages[2]), before) {
					t.Error("fenced page was written")
				}
				if s := h.recv.Stats(); s.StaleFrames != 1 {
					t.Errorf("stale frames %d", s.StaleFrames)
				}
			}
			if len(h.sink.writtenCopy()) != 0 {
				t.Error("pages marked written")
			}
		})
	}
}

// TestOwnerTagMismatch overwrites an shm page header with another owner's
// tag before COMPLETE: decode refuses the transfer.
func TestOwnerTagMismatch(t *testing.T) {
	for _, edit := range []struct {
		name string
		f    func(*pageHeader)
		want error
	}{
		{"other request", func(p *pageHeader) { p.tag = tagOf(Owner{Tenant: "tenant-a", Request: "someone-else"}) }, ErrOwnerMismatch},
		{"other tenant", func(p *pageHeader) { p.tag.tenant[0] ^= 1 }, ErrOwnerMismatch},
		{"old epoch", func(p *pageHeader) { p.epoch-- }, ErrStaleEpoch},
		{"other transfer", func(p *pageHeader) { p.transferID[3] ^= 1 }, ErrIncomplete},
		{"short write", func(p *pageHeader) { p.written-- }, ErrIncomplete},
	} {
		t.Run(edit.name, func(t *testing.T) {
			h := newHarness(t, SHM, 8, 1024, harnessOpts{})
			tk := h.ticket(3*4, 4, 0)
			src := h.randomPages(3)
			ctx := context.Background()
			st, err := h.send.Open(ctx, tk)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := st.Push(ctx, i, 0, src[i]); err != nil {
					t.Fatal(err)
				}
			}
			ph, ok := readPageHeader(h.seg.pageHeaderBytes(tk.Pages[1]))
			if !ok || ph.transferID != tk.TransferID || ph.tag != tagOf(tk.Owner) || ph.epoch != 7 {
				t.Fatalf("page header %+v", ph)
			}
			edit.f(&ph)
			h.seg.writePageHeader(tk.Pages[1], &ph)
			if _, err := st.Complete(ctx, tk.PromptTokens, 0); !errors.Is(err, edit.want) {
				t.Errorf("sender: %v, want %v", err, edit.want)
			}
			if o := h.outcome(); !errors.Is(o.err, edit.want) {
				t.Errorf("outcome %+v", o)
			}
		})
	}
}

// TestPushValidation checks the sender refuses malformed pushes locally.
func TestPushValidation(t *testing.T) {
	h := newHarness(t, TCP, 8, 1024, harnessOpts{})
	tk := h.ticket(2*4, 4, 0)
	ctx := context.Background()
	st, err := h.send.Open(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Abort()
	for _, c := range []struct {
		page, off, n int
	}{{2, 0, 10}, {-1, 0, 10}, {0, 10, 10}, {0, 0, 0}, {0, 0, 1025}} {
		if err := st.Push(ctx, c.page, c.off, make([]byte, c.n)); !errors.Is(err, ErrProtocol) {
			t.Errorf("push %+v: %v", c, err)
		}
	}
	if err := st.Push(ctx, 0, 0, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := st.Push(ctx, 0, 1000, make([]byte, 25)); !errors.Is(err, ErrProtocol) {
		t.Errorf("overlong chunk: %v", err)
	}
}

// TestShmVerifiesWhileWriting: decode checks sealed pages while the
// sender is still writing, so a page corrupted after its checksum was taken
// fails the transfer before COMPLETE is even sent, and the sender stops
// with decode's reason.
func TestShmVerifiesWhileWriting(t *testing.T) {
	inj := faults.New(faults.Rule{Point: faults.ShmPageDone, Action: faults.Corrupt,
		Match: func(e *faults.Event) bool { return e.Page == 1 }})
	h := newHarness(t, SHM, 8, 4096, harnessOpts{faults: inj})
	tk := h.ticket(4*16, 16, 0)
	src := h.randomPages(4)
	ctx := context.Background()
	st, err := h.send.Open(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := st.Push(ctx, i, 0, src[i]); err != nil {
			t.Fatal(err)
		}
	}
	o := h.outcome() // no COMPLETE was sent
	if !errors.Is(o.err, ErrChecksum) || !strings.Contains(o.err.Error(), "does not match its header checksum") {
		t.Fatalf("decode outcome %v, want the early checksum failure", o.err)
	}
	for i := 2; i < 4 && err == nil; i++ {
		err = st.Push(ctx, i, 0, src[i])
	}
	if err == nil {
		_, err = st.Complete(ctx, tk.PromptTokens, 0)
	}
	if !errors.Is(err, ErrChecksum) {
		t.Errorf("sender: %v, want decode's checksum failure", err)
	}
	if len(h.sink.writtenCopy()) != 0 {
		t.Error("pages marked written")
	}
	if s := h.recv.Stats(); s.ChecksumFailures != 1 || s.Failed != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestReceiverFaultHooks exercises decode's fault points: a DATA frame
// dropped after it was authenticated leaves its page short; a verdict lost
// on the way leaves the sender with a connection that ended; a verdict held
// back keeps the sender waiting until it gives up (though decode completed
// the transfer in both cases).
func TestReceiverFaultHooks(t *testing.T) {
	t.Run("drop received frame", func(t *testing.T) {
		inj := faults.New(faults.Rule{Point: faults.RecvFrame, Action: faults.Drop,
			Match: func(e *faults.Event) bool { return e.Frame.Type == "DATA" && e.Frame.PageIndex == 1 }})
		h := newHarness(t, TCP, 8, 4096, harnessOpts{recvFaults: inj})
		tk := h.ticket(3*16, 16, 0)
		if _, err := h.send.Send(context.Background(), tk, slicePages(h.randomPages(3)), tk.PromptTokens, 0); !errors.Is(err, ErrIncomplete) {
			t.Errorf("sender: %v", err)
		}
		if o := h.outcome(); !errors.Is(o.err, ErrIncomplete) || inj.Fired(0) != 1 {
			t.Errorf("outcome %v, fired %d", o.err, inj.Fired(0))
		}
	})
	t.Run("lost verdict", func(t *testing.T) {
		inj := faults.New(faults.Rule{Point: faults.SendResult, Action: faults.Drop})
		h := newHarness(t, SHM, 8, 4096, harnessOpts{recvFaults: inj})
		tk := h.ticket(2*16, 16, 0)
		if _, err := h.send.Send(context.Background(), tk, slicePages(h.randomPages(2)), tk.PromptTokens, 0); !errors.Is(err, ErrIncomplete) {
			t.Errorf("sender: %v", err)
		}
		if o := h.outcome(); o.err != nil {
			t.Errorf("decode: %v", o.err)
		}
	})
	t.Run("held verdict", func(t *testing.T) {
		inj := faults.New(faults.Rule{Point: faults.SendResult, Action: faults.Stall})
		h := newHarness(t, SHM, 8, 4096, harnessOpts{recvFaults: inj})
		t.Cleanup(inj.Release)
		tk := h.ticket(2*16, 16, 0)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := h.send.Send(ctx, tk, slicePages(h.randomPages(2)), tk.PromptTokens, 0)
			done <- err
		}()
		if o := h.outcome(); o.err != nil {
			t.Fatalf("decode: %v", o.err)
		}
		select {
		case err := <-done:
			t.Fatalf("sender returned without a verdict: %v", err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, ErrAborted) {
			t.Errorf("sender: %v", err)
		}
	})
}

// TestAbortAtOpened aborts a stream at the stage "decode accepted, nothing
// written yet" (the Opened fault point): the stream drains without writing
// a byte and decode fails the transfer with the sender's abort.
func TestAbortAtOpened(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			inj := faults.New(faults.Rule{Point: faults.Opened, Action: faults.Stall})
			h := newHarness(t, b, 8, 4096, harnessOpts{faults: inj})
			tk := h.ticket(2*16, 16, 0)
			before := bytes.Clone(h.page(tk.Pages[0]))
			ctx, cancel := context.WithCancel(context.Background())
			opened := make(chan *Stream, 1)
			go func() {
				st, err := h.send.Open(ctx, tk)
				if err != nil {
					t.Error(err)
				}
				opened <- st
			}()
			<-inj.Stalled()
			cancel()
			inj.Release()
			st := <-opened
			if st == nil {
				return
			}
			if err := st.Push(ctx, 0, 0, h.randomPages(1)[0]); !errors.Is(err, ErrAborted) || !errors.Is(err, context.Canceled) {
				t.Errorf("push after the abort: %v", err)
			}
			if d := st.Abort(); !d.Acked || d.TransferID != tk.TransferID {
				t.Errorf("drain %+v", d)
			}
			if o := h.outcome(); !errors.Is(o.err, ErrAborted) {
				t.Errorf("decode outcome %v", o.err)
			}
			if !bytes.Equal(h.page(tk.Pages[0]), before) || h.sink.pageDatas.Load() != 0 {
				t.Error("a page was touched")
			}
		})
	}
}

// TestShmVerifyAtComplete: with TLS decode cannot watch the socket, so it
// verifies the pages at COMPLETE, on several goroutines when there are
// many; a clean transfer completes and a page corrupted after its checksum
// was taken is caught there.
func TestShmVerifyAtComplete(t *testing.T) {
	const pages, pageBytes = 12, 1 << 20 // 12 MiB: hashed in parallel
	for _, corrupt := range []bool{false, true} {
		t.Run(fmt.Sprintf("corrupt=%v", corrupt), func(t *testing.T) {
			var rules []faults.Rule
			if corrupt {
				rules = append(rules, faults.Rule{Point: faults.ShmPageDone, Action: faults.Corrupt,
					Match: func(e *faults.Event) bool { return e.Page == 7 }})
			}
			h := newHarness(t, SHM, pages, pageBytes, harnessOpts{tls: true, faults: faults.New(rules...)})
			tk := h.ticket(pages*16, 16, 0)
			src := h.randomPages(pages)
			_, err := h.send.Send(context.Background(), tk, slicePages(src), tk.PromptTokens, 0)
			o := h.outcome()
			if corrupt {
				if !errors.Is(err, ErrChecksum) || !errors.Is(o.err, ErrChecksum) ||
					!strings.Contains(o.err.Error(), fmt.Sprintf("page %d data does not match the sender's checksum", tk.Pages[7])) {
					t.Fatalf("send %v, outcome %v", err, o.err)
				}
				return
			}
			if err != nil || o.err != nil {
				t.Fatalf("send %v, outcome %v", err, o.err)
			}
			for i, p := range tk.Pages {
				if !bytes.Equal(h.page(p), src[i]) {
					t.Errorf("page %d differs", i)
				}
			}
		})
	}
}
