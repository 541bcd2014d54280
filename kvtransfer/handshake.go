package kvtransfer

import (
	"crypto/hmac"
	"crypto/rand"
	"fmt"
	"io"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// The handshake (I10). The sender (client) proves it holds the ticket's
// auth token before the receiver (server) reveals or accepts anything, and
// the receiver proves it in return before the sender writes a byte. Fresh
// nonces from both ends make every message single-use:
//
//	S→C Challenge  version, server nonce (sent on accept)
//	C→S Hello      version, backend, transfer ID, client nonce, the
//	               sender's trace context (telemetry only), the owner tag
//	               of the KV it computed (tenant, request, adapter),
//	               HMAC(token, "client proof"‖id‖nc‖ns‖trace‖owner)
//	S→C Accept     status, shm segment ID; MAC'd with the S→C session key
//
// Session keys are HMAC(token, label‖id‖nc‖ns), one per direction; they
// key the frame MACs, and the Accept MAC is the receiver's proof. An
// unknown transfer, a wrong proof or garbage gets the connection closed
// without another byte. The receiver claims the transfer only after the
// proof verified; the sender writes nothing before a valid Accept.
//
// The owner tag is the sender's ticket's owner: the prefill worker checks
// that it is the request whose KV it computes, adapter included. The
// receiver refuses (Accept status ErrOwnerMismatch, the transfer fails)
// a tag other than its reservation's: KV computed for another tenant,
// request or LoRA adapter never enters decode's pages (I4, I8a).
// One and a half round trips after connect; one on a reused connection,
// where the receiver sent the Challenge when the previous transfer ended.

// clientSession is what a completed client handshake yields.
type clientSession struct {
	in, out   *wire.MAC
	segmentID [16]byte
}

// clientHandshake runs the sender's side of the handshake on rw; tc is
// the trace context the Hello carries.
func clientHandshake(rw io.ReadWriter, t *Ticket, tc wire.TraceContext) (clientSession, error) {
	var cs clientSession
	var cb [wire.ChallengeSize]byte
	if _, err := io.ReadFull(rw, cb[:]); err != nil {
		return cs, fmt.Errorf("%w: reading challenge: %w", ErrUnauthenticated, errIO{err})
	}
	ch, err := wire.ParseChallenge(cb[:])
	if err != nil {
		return cs, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if ch.Version != wire.Version {
		return cs, fmt.Errorf("%w: receiver speaks version %d, we %d", ErrProtocol, ch.Version, wire.Version)
	}
	hello := wire.Hello{Version: wire.Version, Backend: t.Backend.code(), TransferID: t.TransferID, Trace: tc, Owner: tagOf(t.Owner).wire()}
	rand.Read(hello.ClientNonce[:])
	hello.ClientProof = wire.ClientProof(t.AuthToken, t.TransferID, hello.ClientNonce, ch.ServerNonce, tc, hello.Owner)
	hb := hello.Marshal()
	if _, err := rw.Write(hb[:]); err != nil {
		return cs, errIO{err}
	}
	c2s, s2c := wire.SessionKeys(t.AuthToken, t.TransferID, hello.ClientNonce, ch.ServerNonce)
	cs.in, cs.out = wire.NewMAC(s2c[:]), wire.NewMAC(c2s[:])
	var ab [wire.AcceptSize]byte
	if _, err := io.ReadFull(rw, ab[:]); err != nil {
		return cs, fmt.Errorf("%w: receiver closed the handshake: %w", ErrUnauthenticated, errIO{err})
	}
	acc, err := wire.ParseAccept(ab[:], cs.in)
	if err != nil {
		return cs, fmt.Errorf("%w: receiver did not prove the ticket's token: %w", ErrUnauthenticated, err)
	}
	if acc.Status != 0 {
		return cs, fmt.Errorf("receiver refused transfer: %w", codeErr(acc.Status))
	}
	cs.segmentID = acc.SegmentID
	return cs, nil
}

// serverSession is what the receiver's handshake yields.
type serverSession struct {
	t       *Ticket
	in, out *wire.MAC
	backend uint8
	trace   wire.TraceContext // the sender's, as its proof vouched
	// owner is the tag of the owner whose KV the sender computed, as its
	// proof vouched.
	owner [wire.OwnerTagSize]byte
}

// serverAuthenticate runs the receiver's side up to and including the
// verification of the sender's proof. lookup resolves the transfer;
// nothing is admitted yet. The caller then claims the transfer and answers
// with sendAccept.
func serverAuthenticate(rw io.ReadWriter, lookup func(TransferID) (*Ticket, bool)) (serverSession, error) {
	var ss serverSession
	ch := wire.Challenge{Version: wire.Version}
	rand.Read(ch.ServerNonce[:])
	cb := ch.Marshal()
	if _, err := rw.Write(cb[:]); err != nil {
		return ss, errIO{err}
	}
	var hb [wire.HelloSize]byte
	if _, err := io.ReadFull(rw, hb[:]); err != nil {
		return ss, fmt.Errorf("%w: reading hello: %w", ErrUnauthenticated, errIO{err})
	}
	hello, err := wire.ParseHello(hb[:])
	if err != nil {
		return ss, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if hello.Version != wire.Version {
		return ss, fmt.Errorf("%w: unsupported version %d", ErrUnauthenticated, hello.Version)
	}
	id := TransferID(hello.TransferID)
	t, ok := lookup(id)
	if !ok || len(t.AuthToken) != AuthTokenSize {
		return ss, fmt.Errorf("%w: unknown transfer %v", ErrUnauthenticated, id)
	}
	want := wire.ClientProof(t.AuthToken, hello.TransferID, hello.ClientNonce, ch.ServerNonce, hello.Trace, hello.Owner)
	if !hmac.Equal(want[:], hello.ClientProof[:]) {
		return ss, fmt.Errorf("%w: sender did not prove the token of transfer %v", ErrUnauthenticated, id)
	}
	c2s, s2c := wire.SessionKeys(t.AuthToken, hello.TransferID, hello.ClientNonce, ch.ServerNonce)
	ss.t, ss.in, ss.out, ss.backend, ss.trace = t, wire.NewMAC(c2s[:]), wire.NewMAC(s2c[:]), hello.Backend, hello.Trace
	ss.owner = hello.Owner
	return ss, nil
}

// sendAccept ends the handshake with status (nil: accepted).
func sendAccept(w io.Writer, out *wire.MAC, status error, segmentID [16]byte) error {
	a := wire.Accept{SegmentID: segmentID}
	if status != nil {
		a.Status = errCode(status)
	}
	b := a.Marshal(out)
	if _, err := w.Write(b[:]); err != nil {
		return errIO{err}
	}
	return nil
}

// wire is t as the Hello carries it.
func (t ownerTag) wire() [wire.OwnerTagSize]byte {
	var b [wire.OwnerTagSize]byte
	copy(b[0:16], t.tenant[:])
	copy(b[16:32], t.request[:])
	copy(b[32:48], t.adapter[:])
	return b
}
