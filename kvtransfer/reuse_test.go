package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// sendOK runs one transfer of fresh random pages and checks decode
// completed it with those bytes.
func sendOK(t *testing.T, h *harness, tk *Ticket) {
	t.Helper()
	src := h.randomPages(tk.PromptPages())
	if _, err := h.send.Send(context.Background(), tk, slicePages(src), tk.PromptTokens, 3); err != nil {
		t.Fatalf("transfer %v: %v", tk.TransferID, err)
	}
	if o := h.outcome(); o.err != nil || o.t.TransferID != tk.TransferID {
		t.Fatalf("outcome %+v", o)
	}
	for i, p := range tk.Pages[:tk.PromptPages()] {
		if !bytes.Equal(h.page(p), src[i]) {
			t.Fatalf("transfer %v page %d differs", tk.TransferID, i)
		}
	}
}

// TestConnectionReuse: transfers to the same decode share one connection,
// each still running its own handshake.
func TestConnectionReuse(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 40, 4096, harnessOpts{})
			for range 5 {
				sendOK(t, h, h.ticket(4*16, 16, 0))
			}
			if s := h.send.Stats(); s.Dials != 1 || s.Completed != 5 {
				t.Errorf("sender stats %+v, want 1 dial for 5 transfers", s)
			}
			if s := h.recv.Stats(); s.Connections != 1 || s.Transfers != 5 || s.Completed != 5 || s.AuthFailures != 0 {
				t.Errorf("receiver stats %+v", s)
			}
		})
	}
}

// TestReusedConnectionStillAuthenticates: a transfer on a reused
// connection must prove its own ticket's token; a wrong one is refused
// before anything is read, and the connection is not used again. (Decode
// answers a bad proof by closing, which the sender cannot tell from an
// idle connection decode closed, so it tries once more on a new one.)
func TestReusedConnectionStillAuthenticates(t *testing.T) {
	h := newHarness(t, SHM, 16, 4096, harnessOpts{})
	sendOK(t, h, h.ticket(2*16, 16, 0))
	tk := h.ticket(2*16, 16, 0)
	forged := *tk
	forged.AuthToken = NewAuthToken()
	before := bytes.Clone(h.page(tk.Pages[0]))
	if _, err := h.send.Open(context.Background(), &forged); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Open with a forged token on a reused connection: %v", err)
	}
	if !bytes.Equal(h.page(tk.Pages[0]), before) {
		t.Fatal("page written without the token")
	}
	h.noMoreOutcomes()
	waitFor(func() bool { return h.recv.Stats().AuthFailures >= 2 })
	sendOK(t, h, tk)
	if s := h.send.Stats(); s.Dials != 3 {
		t.Errorf("%d dials, want 3: a connection that failed a proof was reused", s.Dials)
	}
	if s := h.recv.Stats(); s.AuthFailures != 2 || s.Transfers != 2 {
		t.Errorf("receiver stats %+v", s)
	}
}

// TestFailedTransferClosesConnection: a connection whose transfer failed
// is not reused.
func TestFailedTransferClosesConnection(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 16, 4096, harnessOpts{})
			tk := h.ticket(2*16, 16, 0)
			if _, err := h.send.Send(context.Background(), tk, slicePages(h.randomPages(2)), tk.PromptTokens+1, 0); !errors.Is(err, ErrTokenCount) {
				t.Fatalf("Send: %v", err)
			}
			if o := h.outcome(); !errors.Is(o.err, ErrTokenCount) {
				t.Fatalf("outcome %+v", o)
			}
			sendOK(t, h, h.ticket(2*16, 16, 0))
			if s := h.send.Stats(); s.Dials != 2 {
				t.Errorf("%d dials, want a fresh connection after the failure", s.Dials)
			}
		})
	}
}

// TestIdleConnectionClosedByDecode: decode closed the idle connection
// (its idle timeout passed); the next transfer notices before anything was
// accepted, dials again and succeeds, and decode counts no auth failure.
func TestIdleConnectionClosedByDecode(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 16, 4096, harnessOpts{recvIdleConn: time.Nanosecond})
			sendOK(t, h, h.ticket(2*16, 16, 0))
			sendOK(t, h, h.ticket(2*16, 16, 0))
			if s := h.send.Stats(); s.Dials != 2 {
				t.Errorf("%d dials, want 2", s.Dials)
			}
			if s := h.recv.Stats(); s.AuthFailures != 0 || s.Completed != 2 {
				t.Errorf("receiver stats %+v", s)
			}
		})
	}
}

// TestNoReuseConfigured: MaxIdleConns < 0 and an expired idle timeout
// both mean one connection per transfer.
func TestNoReuseConfigured(t *testing.T) {
	for name, o := range map[string]harnessOpts{
		"disabled": {maxIdle: -1},
		"expired":  {sendIdleConn: time.Nanosecond},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, TCP, 16, 4096, o)
			for range 3 {
				sendOK(t, h, h.ticket(2*16, 16, 0))
			}
			if s := h.send.Stats(); s.Dials != 3 {
				t.Errorf("%d dials for 3 transfers", s.Dials)
			}
		})
	}
}

// TestReceiverCloseDuringShmTransfer: Close while an shm session waits
// between frames (verifying pages as they are sealed) ends the session,
// fails the transfer and returns.
func TestReceiverCloseDuringShmTransfer(t *testing.T) {
	h, tk, st := shmOnePageWritten(t, harnessOpts{})
	h.recv.Close()
	if o := h.outcome(); o.err == nil {
		t.Fatal("transfer completed")
	}
	if d := st.Abort(); d.TransferID != tk.TransferID {
		t.Errorf("drain %+v", d)
	}
}
