package kvtransfer

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// frameWriter seals and writes frames in one direction of a connection.
// It is not safe for concurrent use; each side serialises its writes.
type frameWriter struct {
	mac *wire.MAC
	seq uint64
	hb  [wire.HeaderSize]byte
	// arr holds header and payload for one vectored write through vec
	// (fields, so the write allocates nothing).
	arr [2][]byte
	vec net.Buffers
}

// write assigns the next sequence number to h, seals it and writes header
// and payload with one vectored write where the connection supports it.
// For non-DATA frames the checksum and MAC also cover the payload. It
// returns the bytes written so callers can tell a partial frame (the stream
// is then out of sync and must be closed).
func (f *frameWriter) write(w io.Writer, h *wire.Header, payload []byte) (int64, error) {
	h.Seq = f.seq
	f.seq++
	h.Length = uint32(len(payload))
	sealed := payload
	if h.Type == wire.Data {
		sealed = nil
	} else {
		h.Checksum = wire.Checksum(payload)
	}
	h.Marshal(&f.hb)
	f.mac.SealHeader(&f.hb, sealed)
	if len(payload) == 0 {
		n, err := w.Write(f.hb[:])
		return int64(n), err
	}
	return f.writev(w, payload)
}

// writev writes the header in f.hb and payload, with one system call
// where w supports it.
func (f *frameWriter) writev(w io.Writer, payload []byte) (int64, error) {
	f.arr = [2][]byte{f.hb[:], payload}
	f.vec = f.arr[:]
	n, err := f.vec.WriteTo(w)
	f.arr = [2][]byte{} // keep no reference to the payload
	return n, err
}

// frameReader reads and authenticates frames in one direction.
type frameReader struct {
	mac *wire.MAC
	seq uint64
	hb  [wire.HeaderSize]byte
	buf []byte
}

// errIO marks errors of the underlying connection (as opposed to bad
// frames), so callers can tell "peer went away" from "peer misbehaved".
type errIO struct{ err error }

func (e errIO) Error() string { return e.err.Error() }
func (e errIO) Unwrap() error { return e.err }

// next reads one frame header and authenticates it. For non-DATA frames
// it also reads the payload (rejecting lengths above maxCtrl before
// allocating) and authenticates that; a DATA payload is left unread for
// the caller. Sequence numbers must arrive in order: a repeated one is
// ErrDuplicate, a skipped one ErrIncomplete.
func (f *frameReader) next(r io.Reader, maxCtrl int) (wire.Header, []byte, error) {
	if _, err := io.ReadFull(r, f.hb[:]); err != nil {
		return wire.Header{}, nil, errIO{err}
	}
	h, err := wire.ParseHeader(&f.hb)
	if err != nil {
		return h, nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	var payload []byte
	if h.Type != wire.Data {
		if int64(h.Length) > int64(maxCtrl) {
			return h, nil, fmt.Errorf("%w: %v payload %d bytes exceeds %d", ErrProtocol, h.Type, h.Length, maxCtrl)
		}
		if cap(f.buf) < int(h.Length) {
			f.buf = make([]byte, h.Length)
		}
		payload = f.buf[:h.Length]
		if _, err := io.ReadFull(r, payload); err != nil {
			return h, nil, errIO{err}
		}
	}
	if !f.mac.VerifyHeader(&f.hb, payload) {
		return h, nil, fmt.Errorf("%w: bad frame MAC", ErrUnauthenticated)
	}
	switch {
	case h.Seq < f.seq:
		return h, nil, fmt.Errorf("%w: %v frame seq %d again (expected %d)", ErrDuplicate, h.Type, h.Seq, f.seq)
	case h.Seq > f.seq:
		return h, nil, fmt.Errorf("%w: frames %d..%d missing", ErrIncomplete, f.seq, h.Seq-1)
	}
	f.seq++
	if h.Type != wire.Data && wire.Checksum(payload) != h.Checksum {
		return h, nil, fmt.Errorf("%w: %v payload", ErrChecksum, h.Type)
	}
	return h, payload, nil
}

// isTimeout reports whether err is a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rewrite writes the last frame again, byte for byte (fault injection of a
// duplicated frame).
func (f *frameWriter) rewrite(w io.Writer, payload []byte) (int64, error) {
	return f.writev(w, payload)
}

// faultFrame is h as the fault injector sees it.
func faultFrame(h *wire.Header) *faults.Frame {
	return &faults.Frame{Type: h.Type.String(), TransferID: h.TransferID, Epoch: h.Epoch,
		PageIndex: h.PageIndex, PageID: h.PageID, Offset: h.Offset, Checksum: h.Checksum}
}

// hitSendFrame consults inj before h is sent (page and offset locate a
// DATA frame, bytes is what the stream sent before) and applies a Mutate
// to h.
func hitSendFrame(inj *faults.Injector, h *wire.Header, page, offset int, bytes int64) faults.Action {
	f := faultFrame(h)
	a := inj.Hit(&faults.Event{Point: faults.SendFrame, Transfer: h.TransferID, Epoch: h.Epoch,
		Frame: f, Page: page, Offset: offset, Bytes: bytes})
	h.TransferID, h.Epoch, h.PageIndex, h.PageID, h.Offset, h.Checksum =
		f.TransferID, f.Epoch, f.PageIndex, f.PageID, f.Offset, f.Checksum
	return a
}
