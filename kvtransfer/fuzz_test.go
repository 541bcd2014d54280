package kvtransfer

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// fuzzTicket is a fixed ticket the fuzz targets' receivers know.
func fuzzTicket(b Backend, path string) *Ticket {
	return &Ticket{
		TransferID: TransferID{0xaa, 1}, Owner: Owner{Tenant: "t", Request: "r", Epoch: 3, Adapter: testAdapterA},
		Pages: []int32{2, 0, 3}, PageTokens: 4, PromptTokens: 10, PageBytes: 256,
		AuthToken: make([]byte, AuthTokenSize), Addr: "127.0.0.1:1", Backend: b, ShmPath: path,
	}
}

// FuzzServerHandshake feeds arbitrary bytes to the receiver as a client.
// Whatever they are, the receiver must close without a panic and without
// touching a page or deciding a transfer.
func FuzzServerHandshake(f *testing.F) {
	tk := fuzzTicket(TCP, "")
	hello := wire.Hello{Version: wire.Version, Backend: TCP.code(), TransferID: tk.TransferID, Owner: tagOf(tk.Owner).wire()}
	hb := hello.Marshal()
	f.Add(hb[:])
	other := tk.Owner
	other.Adapter = testAdapterB
	hello.Owner = tagOf(other).wire()
	hb2 := hello.Marshal()
	f.Add(hb2[:])
	f.Add(append(hb[:], validFrames(tk, true)...))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		sink := newMemSink(make([]byte, 4*256), 256)
		sink.add(tk)
		r, err := NewReceiver(ReceiverConfig{Sink: sink, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		conn := newFakeConn(in)
		r.sem <- struct{}{}
		if !r.track(conn) {
			t.Fatal("track")
		}
		r.handle(conn)
		if sink.checkWrites.Load() != 0 || sink.pageDatas.Load() != 0 || len(sink.outcomes) != 0 {
			t.Fatal("unauthenticated bytes reached the sink")
		}
		if s := r.Stats(); s.Transfers != 0 {
			t.Fatalf("transfer admitted: %+v", s)
		}
	})
}

// FuzzClientHandshake feeds arbitrary bytes to the sender as decode's
// answers: it must refuse without a panic.
func FuzzClientHandshake(f *testing.F) {
	tk := fuzzTicket(TCP, "")
	ch := wire.Challenge{Version: wire.Version}
	cb := ch.Marshal()
	f.Add(cb[:])
	ab := (&wire.Accept{}).Marshal(wire.NewMAC(make([]byte, 32)))
	f.Add(append(cb[:], ab[:]...))
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, err := clientHandshake(newFakeConn(in), tk, wire.TraceContext{}); err == nil {
			t.Fatal("handshake succeeded without the token")
		}
	})
}

// fuzzKey is the C→S session key FuzzReceiverFrames seals frames with.
var fuzzKey = []byte("fuzz session key c2s")

// resealFrames walks in as a sequence of frames and re-computes each
// header MAC with fuzzKey, so the fuzzer explores the receiver's frame
// logic instead of bouncing off the MAC.
func resealFrames(in []byte) []byte {
	m := wire.NewMAC(fuzzKey)
	out := make([]byte, 0, len(in))
	for len(in) >= wire.HeaderSize {
		var hb [wire.HeaderSize]byte
		copy(hb[:], in)
		in = in[wire.HeaderSize:]
		h, err := wire.ParseHeader(&hb)
		if err != nil {
			out = append(out, hb[:]...)
			break
		}
		n := min(int(h.Length), len(in))
		payload := in[:n]
		in = in[n:]
		if h.Type == wire.Data {
			m.SealHeader(&hb, nil)
		} else {
			m.SealHeader(&hb, payload)
		}
		out = append(out, hb[:]...)
		out = append(out, payload...)
	}
	return append(out, in...)
}

// validFrames returns a well-formed frame sequence for tk: page data in
// two chunks per page, then COMPLETE.
func validFrames(tk *Ticket, withData bool) []byte {
	var buf fakeWriter
	fw := frameWriter{mac: wire.NewMAC(fuzzKey)}
	var sums []uint64
	for i, p := range tk.Pages[:tk.PromptPages()] {
		page := make([]byte, tk.PageBytes)
		for j := range page {
			page[j] = byte(i + j)
		}
		sums = append(sums, wire.Checksum(page))
		if !withData {
			continue
		}
		half := len(page) / 2
		for _, c := range [][2]int{{0, half}, {half, len(page)}} {
			h := wire.Header{Type: wire.Data, TransferID: tk.TransferID, Epoch: tk.Owner.Epoch,
				PageIndex: uint32(i), PageID: p, Offset: uint32(c[0]), Checksum: wire.Checksum(page[:c[1]])}
			fw.write(&buf, &h, page[c[0]:c[1]])
		}
	}
	c := wire.CompletePayload{Tokens: tk.PromptTokens, Checksums: sums}
	h := wire.Header{Type: wire.Complete, TransferID: tk.TransferID, Epoch: tk.Owner.Epoch}
	fw.write(&buf, &h, wire.AppendComplete(nil, &c))
	return buf
}

type fakeWriter []byte

func (w *fakeWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }

// FuzzReceiverFrames drives an authenticated session (tcp or shm, chosen
// by the first byte's low bit; its next bit makes decode hold the first
// page) with arbitrary frames whose MACs are fixed up. The
// receiver must decide the transfer exactly once, never panic, and
// Complete only with the ticket's token count and every page it carries
// written.
func FuzzReceiverFrames(f *testing.F) {
	dir := f.TempDir()
	seg, err := CreateSegment(filepath.Join(dir, "warden-fuzz-kv"), 4, 256)
	if err != nil {
		f.Fatal(err)
	}
	defer seg.Close()
	f.Add(append([]byte{0}, validFrames(fuzzTicket(TCP, ""), true)...))
	f.Add(append([]byte{1}, validFrames(fuzzTicket(SHM, seg.Path()), false)...))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		runFuzzSession(t, seg, in)
	})
}

// runFuzzSession runs one FuzzReceiverFrames input and returns the outcome.
func runFuzzSession(t *testing.T, seg *Segment, in []byte) outcome {
	backend, slab := TCP, make([]byte, 4*256)
	if in[0]&1 == 1 {
		backend, slab = SHM, seg.Data()
	}
	tk := fuzzTicket(backend, seg.Path())
	if in[0]&2 != 0 {
		tk.HeldPages = 1 // decode holds page index 0: a frame for it is a protocol error
	}
	sink := newMemSink(slab, 256)
	sink.add(tk)
	r, err := NewReceiver(ReceiverConfig{Sink: sink, Segment: seg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	conn := newFakeConn(resealFrames(in[1:]))
	rec := &rtransfer{id: tk.TransferID, epoch: tk.Owner.Epoch, backend: backend, t: tk, raw: conn, conn: conn,
		out: frameWriter{mac: wire.NewMAC([]byte("s2c"))}}
	r.transfers[rec.id] = rec
	s := r.newSession(rec, wire.NewMAC(fuzzKey), wire.TraceContext{})
	s.run()
	if len(sink.outcomes) != 1 {
		t.Fatalf("%d outcomes, want exactly 1", len(sink.outcomes))
	}
	o := <-sink.outcomes
	if o.err == nil && (o.c.Tokens != tk.PromptTokens || len(sink.writtenCopy()) != tk.SentPages()) {
		t.Fatalf("completed with %+v, written %v", o.c, sink.writtenCopy())
	}
	return o
}

// TestFuzzSeedCompletes makes sure the frame fuzzer's seed reaches the
// success path, and that flipping one payload byte of it does not.
func TestFuzzSeedCompletes(t *testing.T) {
	seg, err := CreateSegment(filepath.Join(t.TempDir(), "warden-fuzz-kv"), 4, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	in := append([]byte{0}, validFrames(fuzzTicket(TCP, ""), true)...)
	if o := runFuzzSession(t, seg, in); o.err != nil {
		t.Fatalf("seed failed: %v", o.err)
	}
	in[1+wire.HeaderSize+5] ^= 1
	if o := runFuzzSession(t, seg, in); !errors.Is(o.err, ErrChecksum) {
		t.Fatalf("corrupted seed: %v", o.err)
	}
}

// FuzzSegmentLayout feeds arbitrary segment headers (file contents are
// untrusted until checked).
func FuzzSegmentLayout(f *testing.F) {
	l, _ := newLayout(3, 4096)
	b := make([]byte, 64)
	l.marshal(b)
	f.Add(b, int64(l.size))
	f.Add(make([]byte, 64), int64(0))
	f.Fuzz(func(t *testing.T, in []byte, size int64) {
		got, err := parseLayout(in, size)
		if err != nil {
			return
		}
		if int64(got.size) != size || got.dataOffset%4096 != 0 ||
			got.dataOffset < segHeaderSize+got.pages*pageHeaderSize || got.size != got.dataOffset+got.pages*got.pageBytes {
			t.Fatalf("inconsistent layout %+v for size %d", got, size)
		}
	})
}
