package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// Two LoRA adapters' content hashes (the form of lora.Hash).
const (
	testAdapterA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	testAdapterB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestSenderOwnerMustMatchReservation (I4, I8a): the sender's Hello names
// the owner whose KV it computed (its ticket's). A sender whose owner
// differs from decode's reservation in the LoRA adapter (A for B, A for
// the base model, the base model for A) or the tenant is refused at the
// handshake on both backends: Open fails with ErrOwnerMismatch, decode's
// transfer fails with it, and no page is touched. The same adapter on
// both ends transfers.
func TestSenderOwnerMustMatchReservation(t *testing.T) {
	for _, b := range backends {
		for _, c := range []struct {
			name             string
			reserved, sentAs func(*Owner)
			wantErr          error
		}{
			{"adapter A for B", func(o *Owner) { o.Adapter = testAdapterB }, func(o *Owner) { o.Adapter = testAdapterA }, ErrOwnerMismatch},
			{"adapter A for base", func(o *Owner) {}, func(o *Owner) { o.Adapter = testAdapterA }, ErrOwnerMismatch},
			{"base for adapter A", func(o *Owner) { o.Adapter = testAdapterA }, func(o *Owner) { o.Adapter = "" }, ErrOwnerMismatch},
			{"other tenant", func(o *Owner) {}, func(o *Owner) { o.Tenant = "tenant-z" }, ErrOwnerMismatch},
			{"same adapter", func(o *Owner) { o.Adapter = testAdapterA }, func(o *Owner) { o.Adapter = testAdapterA }, nil},
		} {
			t.Run(string(b)+"/"+c.name, func(t *testing.T) {
				h := newHarness(t, b, 8, 1024, harnessOpts{})
				tk := h.ticket(3*4, 4, 0)
				c.reserved(&tk.Owner) // decode's reservation (the sink's ticket)
				sent := *tk
				c.sentAs(&sent.Owner) // what prefill computed for
				src := h.randomPages(3)
				before := bytes.Clone(h.sink.slab)
				var headers []byte
				if b == SHM {
					headers = bytes.Clone(h.seg.headers)
				}
				res, err := h.send.Send(context.Background(), &sent, slicePages(src), tk.PromptTokens, 9)
				o := h.outcome()
				if c.wantErr == nil {
					if err != nil || o.err != nil || res.Pages != 3 {
						t.Fatalf("same owner: sender %+v, %v; decode %v", res, err, o.err)
					}
					for i, p := range tk.Pages {
						if !bytes.Equal(h.page(p), src[i]) {
							t.Fatalf("page index %d differs", i)
						}
					}
					return
				}
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("sender: %v, want %v", err, c.wantErr)
				}
				if o.t != tk || !errors.Is(o.err, c.wantErr) {
					t.Fatalf("decode's outcome %+v, want a failure with %v", o, c.wantErr)
				}
				h.noMoreOutcomes()
				if n, m := h.sink.checkWrites.Load(), h.sink.pageDatas.Load(); n != 0 || m != 0 || len(h.sink.writtenCopy()) != 0 {
					t.Fatalf("a refused sender reached the pages: %d CheckWrite, %d PageData, written %v", n, m, h.sink.writtenCopy())
				}
				if !bytes.Equal(h.sink.slab, before) || (b == SHM && !bytes.Equal(h.seg.headers, headers)) {
					t.Fatal("a refused sender wrote into decode's pages")
				}
				if s := h.recv.Stats(); s.Failed != 1 || s.Completed != 0 || s.AuthFailures != 0 {
					t.Fatalf("receiver stats %+v", s)
				}
				if _, live := h.sink.Lookup(tk.TransferID); live {
					t.Fatal("the refused transfer is still live")
				}
			})
		}
	}
}

// TestPageHeaderCarriesAdapter: the shm page header's owner tag covers
// the adapter, so a page written for the same tenant and request under
// another adapter is an owner mismatch at verification.
func TestPageHeaderCarriesAdapter(t *testing.T) {
	h := newHarness(t, SHM, 8, 1024, harnessOpts{})
	tk := h.ticket(3*4, 4, 0)
	tk.Owner.Adapter = testAdapterA
	ctx := context.Background()
	st, err := h.send.Open(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range h.randomPages(3) {
		if err := st.Push(ctx, i, 0, p); err != nil {
			t.Fatal(err)
		}
	}
	ph, ok := readPageHeader(h.seg.pageHeaderBytes(tk.Pages[2]))
	if !ok || ph.tag != tagOf(tk.Owner) {
		t.Fatalf("page header %+v, want adapter A's owner tag", ph)
	}
	other := tk.Owner
	other.Adapter = testAdapterB
	if tagOf(other) == ph.tag || tagOf(Owner{Tenant: tk.Owner.Tenant, Request: tk.Owner.Request}) == ph.tag {
		t.Fatal("the owner tag does not cover the adapter")
	}
	ph.tag = tagOf(other)
	h.seg.writePageHeader(tk.Pages[2], &ph)
	if _, err := st.Complete(ctx, tk.PromptTokens, 0); !errors.Is(err, ErrOwnerMismatch) {
		t.Errorf("sender: %v, want ErrOwnerMismatch", err)
	}
	if o := h.outcome(); !errors.Is(o.err, ErrOwnerMismatch) {
		t.Errorf("outcome %+v", o)
	}
}
