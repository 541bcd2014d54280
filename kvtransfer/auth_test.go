package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// assertUntouched checks the receiver never got as far as a page: no
// CheckWrite, no PageData, no outcome, and the connection counted as an
// authentication failure.
func assertUntouched(t *testing.T, h *harness, authFailures uint64) {
	t.Helper()
	if n, m := h.sink.checkWrites.Load(), h.sink.pageDatas.Load(); n != 0 || m != 0 {
		t.Errorf("sink saw %d CheckWrite and %d PageData calls", n, m)
	}
	h.noMoreOutcomes()
	waitFor(func() bool { return h.recv.Stats().AuthFailures >= authFailures })
	if s := h.recv.Stats(); s.AuthFailures != authFailures || s.Transfers != 0 {
		t.Errorf("stats %+v, want %d auth failures and no transfer", s, authFailures)
	}
}

// drained reads until the peer closes or resets conn and returns how many
// bytes it sent.
func drained(conn net.Conn) int64 {
	n, _ := io.Copy(io.Discard, conn)
	return n
}

func TestUnauthenticatedSenders(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b)+"/wrong token", func(t *testing.T) {
			h := newHarness(t, b, 8, 1024, harnessOpts{})
			tk := h.ticket(8, 4, 0)
			forged := *tk
			forged.AuthToken = NewAuthToken()
			_, err := h.send.Send(context.Background(), &forged, slicePages(h.randomPages(2)), 8, 0)
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Send: %v", err)
			}
			assertUntouched(t, h, 1)
			// The genuine sender still can.
			if _, err := h.send.Send(context.Background(), tk, slicePages(h.randomPages(2)), 8, 0); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(string(b)+"/unknown transfer", func(t *testing.T) {
			h := newHarness(t, b, 8, 1024, harnessOpts{})
			tk := h.ticket(8, 4, 0)
			other := *tk
			other.TransferID = NewTransferID()
			if _, err := h.send.Open(context.Background(), &other); !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Open: %v", err)
			}
			assertUntouched(t, h, 1)
		})
	}
	raw := func(t *testing.T, h *harness) net.Conn {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	t.Run("garbage", func(t *testing.T) {
		h := newHarness(t, TCP, 8, 1024, harnessOpts{})
		h.ticket(8, 4, 0)
		conn := raw(t, h)
		junk := bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 64)
		conn.Write(junk)
		if n := drained(conn); n != wire.ChallengeSize {
			t.Errorf("receiver sent %d bytes, want only its %d-byte challenge", n, wire.ChallengeSize)
		}
		assertUntouched(t, h, 1)
	})
	// challenge reads the receiver's opening Challenge.
	challenge := func(t *testing.T, conn net.Conn) wire.Challenge {
		var cb [wire.ChallengeSize]byte
		if _, err := io.ReadFull(conn, cb[:]); err != nil {
			t.Fatal(err)
		}
		ch, err := wire.ParseChallenge(cb[:])
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	t.Run("hang up after challenge", func(t *testing.T) {
		h := newHarness(t, TCP, 8, 1024, harnessOpts{})
		h.ticket(8, 4, 0)
		conn := raw(t, h)
		challenge(t, conn)
		conn.Close()
		assertUntouched(t, h, 1)
	})
	t.Run("wrong proof then frames", func(t *testing.T) {
		h := newHarness(t, TCP, 8, 1024, harnessOpts{})
		tk := h.ticket(8, 4, 0)
		conn := raw(t, h)
		challenge(t, conn)
		hello := wire.Hello{Version: wire.Version, Backend: TCP.code(), TransferID: tk.TransferID, ClientProof: [32]byte{1, 2, 3}}
		b := hello.Marshal()
		conn.Write(b[:])
		// A page frame right behind the bad proof must not be read.
		conn.Write(make([]byte, wire.HeaderSize+1024))
		if n := drained(conn); n != 0 {
			t.Errorf("receiver answered a bad proof with %d bytes", n)
		}
		assertUntouched(t, h, 1)
	})
	t.Run("replayed proof", func(t *testing.T) {
		// A proof computed for one server nonce is useless for the next.
		h := newHarness(t, TCP, 8, 1024, harnessOpts{})
		tk := h.ticket(8, 4, 0)
		first := raw(t, h)
		ch := challenge(t, first)
		hello := wire.Hello{Version: wire.Version, Backend: TCP.code(), TransferID: tk.TransferID, Owner: tagOf(tk.Owner).wire()}
		hello.ClientProof = wire.ClientProof(tk.AuthToken, tk.TransferID, hello.ClientNonce, ch.ServerNonce, hello.Trace, hello.Owner)
		first.Close()
		second := raw(t, h)
		challenge(t, second)
		b := hello.Marshal()
		second.Write(b[:])
		if n := drained(second); n != 0 {
			t.Errorf("receiver answered a replayed proof with %d bytes", n)
		}
		assertUntouched(t, h, 2)
	})
	t.Run("owner tag changed after the proof", func(t *testing.T) {
		// The proof covers the owner tag: a Hello whose tag was swapped
		// (say, to the reservation's adapter) after the proof is refused
		// without an answer.
		h := newHarness(t, TCP, 8, 1024, harnessOpts{})
		tk := h.ticket(8, 4, 0)
		conn := raw(t, h)
		ch := challenge(t, conn)
		other := tk.Owner
		other.Adapter = "bbbb"
		hello := wire.Hello{Version: wire.Version, Backend: TCP.code(), TransferID: tk.TransferID, Owner: tagOf(other).wire()}
		hello.ClientProof = wire.ClientProof(tk.AuthToken, tk.TransferID, hello.ClientNonce, ch.ServerNonce, hello.Trace, hello.Owner)
		hello.Owner = tagOf(tk.Owner).wire()
		b := hello.Marshal()
		conn.Write(b[:])
		if n := drained(conn); n != 0 {
			t.Errorf("receiver answered a Hello with a swapped owner tag with %d bytes", n)
		}
		assertUntouched(t, h, 1)
	})
	t.Run("unsupported version", func(t *testing.T) {
		h := newHarness(t, TCP, 8, 1024, harnessOpts{})
		tk := h.ticket(8, 4, 0)
		conn := raw(t, h)
		ch := challenge(t, conn)
		hello := wire.Hello{Version: 9, Backend: TCP.code(), TransferID: tk.TransferID}
		hello.ClientProof = wire.ClientProof(tk.AuthToken, tk.TransferID, hello.ClientNonce, ch.ServerNonce, hello.Trace, hello.Owner)
		b := hello.Marshal()
		conn.Write(b[:])
		if n := drained(conn); n != 0 {
			t.Errorf("receiver sent %d more bytes", n)
		}
		assertUntouched(t, h, 1)
	})
	t.Run("bad frame MAC", func(t *testing.T) {
		h := newHarness(t, TCP, 8, 1024, harnessOpts{})
		tk := h.ticket(8, 4, 0)
		conn := raw(t, h)
		if _, err := clientHandshake(conn, tk, wire.TraceContext{}); err != nil {
			t.Fatal(err)
		}
		// A frame sealed with a key the receiver does not hold.
		fw := frameWriter{mac: wire.NewMAC([]byte("not the session key"))}
		hd := wire.Header{Type: wire.Data, TransferID: tk.TransferID, Epoch: tk.Owner.Epoch, PageID: tk.Pages[0], Checksum: wire.Checksum(make([]byte, 1024))}
		if _, err := fw.write(conn, &hd, make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
		o := h.outcome()
		if !errors.Is(o.err, ErrUnauthenticated) {
			t.Fatalf("outcome %+v", o)
		}
		if n, m := h.sink.checkWrites.Load(), h.sink.pageDatas.Load(); n != 0 || m != 0 {
			t.Errorf("sink saw %d CheckWrite and %d PageData calls", n, m)
		}
		if s := h.recv.Stats(); s.AuthFailures != 1 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestSenderRefusesImpostor: a receiver that does not hold the ticket's
// token cannot make the sender write anything.
func TestSenderRefusesImpostor(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 8, 1024, harnessOpts{})
			tk := h.ticket(8, 4, 0)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			impostorDone := make(chan []byte, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					impostorDone <- nil
					return
				}
				defer conn.Close()
				// Play the receiver without the token: a challenge, then an
				// Accept sealed with a guessed key.
				ch := wire.Challenge{Version: wire.Version}
				cb := ch.Marshal()
				conn.Write(cb[:])
				var hb [wire.HelloSize]byte
				io.ReadFull(conn, hb[:])
				acc := wire.Accept{}
				ab := acc.Marshal(wire.NewMAC(NewAuthToken()))
				conn.Write(ab[:])
				rest, _ := io.ReadAll(conn)
				impostorDone <- rest
			}()
			tk2 := *tk
			tk2.Addr = ln.Addr().String()
			before := bytes.Clone(h.page(tk.Pages[0]))
			_, err = h.send.Send(context.Background(), &tk2, slicePages(h.randomPages(2)), 8, 0)
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Send: %v", err)
			}
			if rest := <-impostorDone; len(rest) != 0 {
				t.Errorf("sender sent %d bytes after the failed proof", len(rest))
			}
			if !bytes.Equal(h.page(tk.Pages[0]), before) {
				t.Error("sender wrote into the segment")
			}
		})
	}
}

// TestSecondConnectionRefused: a transfer is served by one connection.
func TestSecondConnectionRefused(t *testing.T) {
	h := newHarness(t, TCP, 8, 1024, harnessOpts{})
	tk := h.ticket(8, 4, 0)
	st, err := h.send.Open(context.Background(), tk)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Abort()
	if _, err := h.send.Open(context.Background(), tk); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Open: %v", err)
	}
}

func TestTLSRoundTrip(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarness(t, b, 8, 4096, harnessOpts{tls: true})
			tk := h.ticket(3*16, 16, 0)
			src := h.randomPages(3)
			if _, err := h.send.Send(context.Background(), tk, slicePages(src), 48, 5); err != nil {
				t.Fatal(err)
			}
			if o := h.outcome(); o.err != nil || o.c.FirstToken != 5 {
				t.Fatalf("outcome %+v", o)
			}
			for i, p := range tk.Pages {
				if !bytes.Equal(h.page(p), src[i]) {
					t.Errorf("page %d differs", i)
				}
			}
		})
	}
}
