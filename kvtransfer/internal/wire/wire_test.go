package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Type: Data, TransferID: [16]byte{1, 2, 3}, Epoch: 9, Seq: 4, PageIndex: 3, PageID: 77, Offset: 4096, Length: 512, Checksum: 0xdeadbeef}
	var b [HeaderSize]byte
	h.Marshal(&b)
	m := NewMAC([]byte("k"))
	m.SealHeader(&b, nil)
	got, err := ParseHeader(&b)
	if err != nil || got != h {
		t.Fatalf("got %+v, %v", got, err)
	}
	if !m.VerifyHeader(&b, nil) {
		t.Error("MAC does not verify")
	}
	b[44] ^= 1 // another destination page
	if m.VerifyHeader(&b, nil) {
		t.Error("MAC verifies a modified header")
	}
	if NewMAC([]byte("other")).VerifyHeader(&b, nil) {
		t.Error("MAC verifies under another key")
	}
}

func TestParseHeaderRejects(t *testing.T) {
	base := Header{Type: Data, Length: 10}
	for name, edit := range map[string]func(*[HeaderSize]byte){
		"magic":        func(b *[HeaderSize]byte) { b[0] ^= 1 },
		"version":      func(b *[HeaderSize]byte) { b[4] = Version + 1 },
		"old type":     func(b *[HeaderSize]byte) { b[5] = 6 }, // PAGES_DONE of version 1
		"type":         func(b *[HeaderSize]byte) { b[5] = 99 },
		"flags":        func(b *[HeaderSize]byte) { b[6] = 1 },
		"zero length":  func(b *[HeaderSize]byte) { clear(b[52:56]) },
		"huge length":  func(b *[HeaderSize]byte) { b[55] = 0xff },
		"ack payload":  func(b *[HeaderSize]byte) { b[5] = byte(DrainAck) },
		"result short": func(b *[HeaderSize]byte) { b[5] = byte(Result) },
	} {
		var b [HeaderSize]byte
		base.Marshal(&b)
		edit(&b)
		if _, err := ParseHeader(&b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestHandshakeMessages(t *testing.T) {
	c := Challenge{Version: Version, ServerNonce: [32]byte{1}}
	cb := c.Marshal()
	if got, err := ParseChallenge(cb[:]); err != nil || got != c {
		t.Errorf("challenge %+v %v", got, err)
	}
	h := Hello{Version: Version, Backend: 2, TransferID: [16]byte{9}, ClientNonce: [32]byte{7}, ClientProof: [32]byte{3},
		Trace: TraceContext{TraceID: [16]byte{5, 6}, SpanID: [8]byte{8}, Flags: 1}, Owner: [OwnerTagSize]byte{1, 47: 2}}
	hb := h.Marshal()
	if got, err := ParseHello(hb[:]); err != nil || got != h {
		t.Errorf("hello %+v %v", got, err)
	}
	m := NewMAC([]byte("s2c"))
	a := Accept{Status: 3, SegmentID: [16]byte{4}}
	ab := a.Marshal(m)
	if got, err := ParseAccept(ab[:], m); err != nil || got != a {
		t.Errorf("accept %+v %v", got, err)
	}
	if _, err := ParseAccept(ab[:], NewMAC([]byte("forged"))); err == nil {
		t.Error("accept under another key parsed")
	}
	tid, cn, sn := [16]byte{1}, [32]byte{2}, [32]byte{3}
	tok := []byte("token")
	c2s, s2c := SessionKeys(tok, tid, cn, sn)
	var none TraceContext
	owner := [OwnerTagSize]byte{4}
	proof := ClientProof(tok, tid, cn, sn, none, owner)
	if c2s == s2c || c2s == proof || s2c == proof {
		t.Error("keys and proof coincide")
	}
	sn2 := sn
	sn2[0] ^= 1
	if ClientProof(tok, tid, cn, sn2, none, owner) == proof {
		t.Error("proof does not depend on the server nonce")
	}
	if ClientProof(tok, [16]byte{2}, cn, sn, none, owner) == proof {
		t.Error("proof does not depend on the transfer")
	}
	if ClientProof(tok, tid, cn, sn, TraceContext{SpanID: [8]byte{1}}, owner) == proof {
		t.Error("proof does not cover the trace context")
	}
	other := owner
	other[OwnerTagSize-1] ^= 1 // the adapter's digest
	if ClientProof(tok, tid, cn, sn, none, other) == proof {
		t.Error("proof does not cover the owner tag")
	}
}

func TestCompleteRoundTrip(t *testing.T) {
	c := CompletePayload{Tokens: 1000, FirstToken: -1, Checksums: []uint64{1, 2, 3}}
	b := AppendComplete(nil, &c)
	if len(b) != CompleteSize(3) {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := ParseComplete(b, 3)
	if err != nil || got.Tokens != 1000 || got.FirstToken != -1 || len(got.Checksums) != 3 || got.Checksums[2] != 3 {
		t.Errorf("%+v %v", got, err)
	}
	if _, err := ParseComplete(b, 2); err == nil {
		t.Error("wrong page count accepted")
	}
	r := MarshalResult(7)
	if code, err := ParseResult(r[:]); err != nil || code != 7 {
		t.Errorf("result %d %v", code, err)
	}
}

// TestStreamingChecksumMatchesOneShot: a page pushed in chunks (running
// checksum) and verified whole (one-shot) must agree.
func TestStreamingChecksumMatchesOneShot(t *testing.T) {
	data := make([]byte, 70000)
	for i := range data {
		data[i] = byte(i * 31)
	}
	for _, chunk := range []int{1, 7, 64, 1000, 1024, 4096, 65536, 70000} {
		h := xxh3.New()
		for off := 0; off < len(data); off += chunk {
			h.Write(data[off:min(off+chunk, len(data))])
		}
		if h.Sum64() != Checksum(data) {
			t.Errorf("chunk %d: streaming checksum differs", chunk)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	var b [HeaderSize]byte
	(&Header{Type: Data, Length: 4096}).Marshal(&b)
	f.Add(b[:])
	(&Header{Type: Complete, Length: 24}).Marshal(&b)
	f.Add(b[:])
	f.Add(bytes.Repeat([]byte{0xff}, HeaderSize))
	m := NewMAC([]byte("k"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var b [HeaderSize]byte
		copy(b[:], in)
		h, err := ParseHeader(&b)
		if err != nil {
			return
		}
		if h.Type == Data && (h.Length == 0 || h.Length > MaxDataPayload) || h.Length > MaxControlPayload {
			t.Fatalf("accepted length %d for %v", h.Length, h.Type)
		}
		var again [HeaderSize]byte
		h.Marshal(&again)
		if !bytes.Equal(again[:HeaderSize-MACSize], b[:HeaderSize-MACSize]) {
			t.Fatal("header does not round-trip")
		}
		m.VerifyHeader(&b, in)
	})
}

func FuzzParseMessages(f *testing.F) {
	hb := (&Hello{Version: Version, Backend: 1, Owner: [OwnerTagSize]byte{9, 47: 9}}).Marshal()
	f.Add(hb[:])
	cb := (&Challenge{Version: Version}).Marshal()
	f.Add(cb[:])
	m := NewMAC([]byte("k"))
	ab := (&Accept{}).Marshal(m)
	f.Add(ab[:])
	f.Add(AppendComplete(nil, &CompletePayload{Tokens: 5, Checksums: []uint64{1}}))
	f.Fuzz(func(t *testing.T, in []byte) {
		if h, err := ParseHello(in); err == nil {
			if b := h.Marshal(); !bytes.Equal(b[:], in) {
				t.Fatal("hello does not round-trip")
			}
		}
		ParseChallenge(in)
		ParseAccept(in, m)
		ParseResult(in)
		// The page count is the receiver's, not the sender's: a claimed
		// count never drives an allocation.
		for _, pages := range []int{0, 1, 3, 1 << 20} {
			if c, err := ParseComplete(in, pages); err == nil && len(c.Checksums) != pages {
				t.Fatalf("%d checksums for %d pages", len(c.Checksums), pages)
			}
		}
	})
}
