package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestHeldPagesNotTransferred: with HeldPages set (decode holds the
// prompt's leading pages in its prefix cache) only the other pages cross
// the wire; the held pages' bytes are never touched, never marked
// written, and a push of one is refused on both ends.
func TestHeldPagesNotTransferred(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			const pageBytes = 4096
			h := newHarness(t, b, 32, pageBytes, harnessOpts{})
			tk := h.ticket(5*16+3, 16, 2) // 6 pages, the last partly filled
			tk.HeldPages = 3
			src := h.randomPages(tk.PromptPages())
			held := make([][]byte, tk.HeldPages)
			for i, p := range tk.Pages[:tk.HeldPages] {
				held[i] = bytes.Clone(h.page(p))
			}
			ctx := context.Background()
			st, err := h.send.Open(ctx, tk)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Push(ctx, 1, 0, src[1]); !errors.Is(err, ErrProtocol) {
				t.Fatalf("push of a held page: %v, want ErrProtocol", err)
			}
			for i := tk.HeldPages; i < tk.PromptPages(); i++ {
				if err := st.Push(ctx, i, 0, src[i]); err != nil {
					t.Fatalf("push page %d: %v", i, err)
				}
			}
			res, err := st.Complete(ctx, tk.PromptTokens, 7)
			if err != nil {
				t.Fatal(err)
			}
			if res.Pages != 3 || res.Bytes != 3*pageBytes {
				t.Errorf("result %+v, want 3 pages", res)
			}
			o := h.outcome()
			if o.err != nil || o.c.Pages != 3 || o.c.Bytes != 3*pageBytes {
				t.Fatalf("outcome %+v", o)
			}
			for i, p := range tk.Pages[:tk.HeldPages] {
				if !bytes.Equal(h.page(p), held[i]) {
					t.Errorf("held page index %d was written", i)
				}
			}
			for i := tk.HeldPages; i < tk.PromptPages(); i++ {
				if !bytes.Equal(h.page(tk.Pages[i]), src[i]) {
					t.Errorf("page index %d differs", i)
				}
			}
			written := h.sink.writtenCopy()
			if len(written) != 3 {
				t.Errorf("%d pages marked written, want 3: %v", len(written), written)
			}
			for _, p := range tk.Pages[:tk.HeldPages] {
				if _, ok := written[p]; ok {
					t.Errorf("held page %d marked written", p)
				}
			}
		})
	}
}

// TestHeldPagesFrameRefused: a tcp DATA frame for a held page is a
// protocol error on the receiver (a sender that ignores HeldPages).
func TestHeldPagesFrameRefused(t *testing.T) {
	const pageBytes = 4096
	h := newHarness(t, TCP, 16, pageBytes, harnessOpts{})
	tk := h.ticket(3*16, 16, 0)
	src := h.randomPages(tk.PromptPages())
	held := bytes.Clone(h.page(tk.Pages[0]))
	ctx := context.Background()
	h.sink.mu.Lock()
	rt := *tk
	rt.HeldPages = 1
	h.sink.tickets[tk.TransferID] = &rt // decode's copy says 1
	h.sink.mu.Unlock()
	st, err := h.send.Open(ctx, tk) // the sender's copy says 0 held
	if err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if err := st.Push(ctx, i, 0, src[i]); err != nil {
			break
		}
	}
	if _, err := st.Complete(ctx, tk.PromptTokens, 1); err == nil {
		t.Fatal("transfer with a frame for a held page completed")
	}
	if o := h.outcome(); !errors.Is(o.err, ErrProtocol) {
		t.Fatalf("outcome %v, want ErrProtocol", o.err)
	}
	if !bytes.Equal(h.page(tk.Pages[0]), held) {
		t.Error("held page was written")
	}
}

func TestTicketHeldPagesValidate(t *testing.T) {
	tk := &Ticket{
		TransferID: NewTransferID(), Owner: Owner{Tenant: "t", Request: "r"},
		Pages: []int32{0, 1, 2}, PageTokens: 16, PromptTokens: 40, PageBytes: 64,
		AuthToken: NewAuthToken(), Backend: TCP,
	}
	for held, ok := range map[int]bool{-1: false, 0: true, 2: true, 3: false} {
		tk.HeldPages = held
		if err := tk.Validate(); (err == nil) != ok {
			t.Errorf("HeldPages %d: %v", held, err)
		}
	}
}
