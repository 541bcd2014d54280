// Package wire encodes and decodes the kvtransfer byte formats: the
// handshake messages, the fixed frame header with its MAC, and the small
// control payloads. It holds no connection state; the kvtransfer package
// drives the protocol.
//
// Every parser here takes untrusted bytes, returns an error for anything
// malformed and never allocates more than a caller-supplied bound.
package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
)

// Version is the protocol version carried by handshake messages and frames.
// Version 3 added the trace context to the Hello, version 4 the owner tag
// (tenant, request and LoRA adapter the sender computed the KV for).
const Version = 4

// ErrMalformed is wrapped by every parse error in this package.
var ErrMalformed = errors.New("malformed message")

// Magic numbers, one per message kind, so a stream that is out of sync or
// speaks another protocol is rejected at the first message.
const (
	magicChallenge uint32 = 0x434b5657 // "WVKC"
	magicHello     uint32 = 0x484b5657 // "WVKH"
	magicAccept    uint32 = 0x414b5657 // "WVKA"
	magicFrame     uint32 = 0x464b5657 // "WVKF"
)

// Sizes of the fixed-size messages.
const (
	ChallengeSize = 40
	HelloSize     = 168
	AcceptSize    = 40
	HeaderSize    = 80
	NonceSize     = 32
	ProofSize     = 32
	MACSize       = 16
	// OwnerTagSize is the size of an owner tag: three 16-byte digests
	// (tenant; tenant and request; adapter), computed by kvtransfer.
	OwnerTagSize = 48
	// macOffset is where the truncated MAC sits in the frame header; the
	// MAC covers header bytes [0, macOffset).
	macOffset = HeaderSize - MACSize
)

// MaxDataPayload bounds the payload of one DATA frame. Larger page chunks
// are split by the sender; a header announcing more is rejected before any
// payload byte is read.
const MaxDataPayload = 4 << 20

// MaxControlPayload bounds the payload of any non-DATA frame regardless of
// the ticket (a COMPLETE for 1M pages); receivers apply a tighter bound
// derived from their ticket.
const MaxControlPayload = 8 << 20

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Challenge opens a connection: the receiver sends its nonce as soon as
// it accepts, before it knows anything about the peer.
type Challenge struct {
	Version     uint8
	ServerNonce [NonceSize]byte
}

// Marshal encodes c.
func (c *Challenge) Marshal() [ChallengeSize]byte {
	var b [ChallengeSize]byte
	binary.LittleEndian.PutUint32(b[0:], magicChallenge)
	b[4] = c.Version
	copy(b[8:40], c.ServerNonce[:])
	return b
}

// ParseChallenge decodes a Challenge.
func ParseChallenge(b []byte) (Challenge, error) {
	var c Challenge
	if len(b) != ChallengeSize {
		return c, malformed("challenge: %d bytes", len(b))
	}
	if le32(b) != magicChallenge {
		return c, malformed("challenge: bad magic")
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return c, malformed("challenge: reserved bytes set")
	}
	c.Version = b[4]
	copy(c.ServerNonce[:], b[8:40])
	return c, nil
}

// TraceContext is a W3C trace context (trace ID, parent span ID, trace
// flags) in binary form. The sender puts its transfer span's context in
// the Hello so that the receiver's span joins the same trace; the zero
// value means none. It is informational: the receiver uses it for
// telemetry only, never to decide anything about the transfer.
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   uint8
}

// Hello answers the Challenge: which transfer, the sender's nonce, the
// sender's trace context, the tag of the owner (tenant, request, LoRA
// adapter) whose KV the sender computed, and its proof that it holds the
// transfer's auth token (the proof covers the trace context and the owner
// tag too). Layout (little-endian):
//
//	  0 magic u32 | 4 version u8 | 5 backend u8 | 6 reserved [2]
//	  8 transfer ID [16] | 24 client nonce [32]
//	 56 trace ID [16] | 72 span ID [8] | 80 trace flags u8 | 81 reserved [7]
//	 88 owner tag [48]
//	136 client proof [32]
type Hello struct {
	Version     uint8
	Backend     uint8
	TransferID  [16]byte
	ClientNonce [NonceSize]byte
	Trace       TraceContext
	Owner       [OwnerTagSize]byte
	ClientProof [ProofSize]byte
}

// Marshal encodes h.
func (h *Hello) Marshal() [HelloSize]byte {
	var b [HelloSize]byte
	binary.LittleEndian.PutUint32(b[0:], magicHello)
	b[4] = h.Version
	b[5] = h.Backend
	copy(b[8:24], h.TransferID[:])
	copy(b[24:56], h.ClientNonce[:])
	putTrace(b[56:88], h.Trace)
	copy(b[88:136], h.Owner[:])
	copy(b[136:168], h.ClientProof[:])
	return b
}

// putTrace writes tc into the 32-byte trace field.
func putTrace(b []byte, tc TraceContext) {
	copy(b[0:16], tc.TraceID[:])
	copy(b[16:24], tc.SpanID[:])
	b[24] = tc.Flags
}

// ParseHello decodes a Hello. It does not check the version.
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) != HelloSize {
		return h, malformed("hello: %d bytes", len(b))
	}
	if le32(b) != magicHello {
		return h, malformed("hello: bad magic")
	}
	if b[6] != 0 || b[7] != 0 {
		return h, malformed("hello: reserved bytes set")
	}
	for _, x := range b[81:88] {
		if x != 0 {
			return h, malformed("hello: reserved bytes set")
		}
	}
	h.Version, h.Backend = b[4], b[5]
	copy(h.TransferID[:], b[8:24])
	copy(h.ClientNonce[:], b[24:56])
	copy(h.Trace.TraceID[:], b[56:72])
	copy(h.Trace.SpanID[:], b[72:80])
	h.Trace.Flags = b[80]
	copy(h.Owner[:], b[88:136])
	copy(h.ClientProof[:], b[136:168])
	return h, nil
}

// Accept ends the handshake (receiver to sender). It is sent only to a
// sender whose proof verified, and MAC'd with the receiver's session key,
// which is derived from the auth token and both nonces: a valid MAC is the
// receiver's proof that it holds the token. Status 0 means go ahead; the
// segment ID names decode's shm segment.
type Accept struct {
	Status    uint16
	SegmentID [16]byte
}

// Marshal encodes a and seals it with mac.
func (a *Accept) Marshal(mac *MAC) [AcceptSize]byte {
	var b [AcceptSize]byte
	binary.LittleEndian.PutUint32(b[0:], magicAccept)
	binary.LittleEndian.PutUint16(b[4:], a.Status)
	copy(b[8:24], a.SegmentID[:])
	mac.sum(b[24:40], b[:24], nil)
	return b
}

// ParseAccept checks an Accept's MAC and decodes it.
func ParseAccept(b []byte, mac *MAC) (Accept, error) {
	var a Accept
	if len(b) != AcceptSize {
		return a, malformed("accept: %d bytes", len(b))
	}
	if le32(b) != magicAccept {
		return a, malformed("accept: bad magic")
	}
	if !mac.verify(b[24:40], b[:24], nil) {
		return a, malformed("accept: bad MAC")
	}
	if b[6] != 0 || b[7] != 0 {
		return a, malformed("accept: reserved bytes set")
	}
	a.Status = binary.LittleEndian.Uint16(b[4:])
	copy(a.SegmentID[:], b[8:24])
	return a, nil
}

// Labels separating the uses of the auth token, so a value computed for one
// purpose is never valid for another.
const (
	labelClientProof = "warden-kv/1 client proof"
	labelC2S         = "warden-kv/1 key client->server"
	labelS2C         = "warden-kv/1 key server->client"
)

func derive(token []byte, label string, tid [16]byte, cn, sn [NonceSize]byte, extra ...[]byte) [32]byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write([]byte{0})
	m.Write(tid[:])
	m.Write(cn[:])
	m.Write(sn[:])
	for _, e := range extra {
		m.Write(e)
	}
	var out [32]byte
	m.Sum(out[:0])
	return out
}

// ClientProof is the sender's proof of the auth token, bound to both
// nonces and to the trace context and owner tag the Hello carries.
func ClientProof(token []byte, tid [16]byte, cn, sn [NonceSize]byte, tc TraceContext, owner [OwnerTagSize]byte) [32]byte {
	var tb [32]byte
	putTrace(tb[:], tc)
	return derive(token, labelClientProof, tid, cn, sn, tb[:], owner[:])
}

// SessionKeys derives the per-connection MAC keys, one per direction.
func SessionKeys(token []byte, tid [16]byte, cn, sn [NonceSize]byte) (c2s, s2c [32]byte) {
	return derive(token, labelC2S, tid, cn, sn), derive(token, labelS2C, tid, cn, sn)
}

// MAC computes truncated HMAC-SHA-256 tags with one session key. It is not
// safe for concurrent use.
type MAC struct {
	h   hash.Hash
	tmp [sha256.Size]byte
}

// NewMAC returns a MAC keyed with key.
func NewMAC(key []byte) *MAC {
	return &MAC{h: hmac.New(sha256.New, key)}
}

func (m *MAC) sum(dst, a, b []byte) {
	m.h.Reset()
	m.h.Write(a)
	m.h.Write(b)
	copy(dst, m.h.Sum(m.tmp[:0])[:MACSize])
}

func (m *MAC) verify(tag, a, b []byte) bool {
	var want [MACSize]byte
	m.sum(want[:], a, b)
	return hmac.Equal(want[:], tag)
}
