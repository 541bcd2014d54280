package kvtransfer

import "errors"

// Sentinel errors. A failed transfer's error wraps exactly one of the
// transfer-outcome errors below, on the receiver (passed to Sink.Fail) and,
// where the receiver could tell it, on the sender.
var (
	// ErrUnauthenticated: the peer did not prove the ticket's auth token
	// (or the transfer is unknown, which looks the same from outside).
	ErrUnauthenticated = errors.New("kvtransfer: peer not authenticated")
	// ErrChecksum: a frame or page checksum did not match.
	ErrChecksum = errors.New("kvtransfer: checksum mismatch")
	// ErrIncomplete: a page did not arrive fully, a frame went missing or
	// the connection ended before COMPLETE.
	ErrIncomplete = errors.New("kvtransfer: transfer incomplete")
	// ErrStaleEpoch: the destination is no longer reserved for the
	// transfer's (request, epoch) — it was fenced.
	ErrStaleEpoch = errors.New("kvtransfer: stale epoch")
	// ErrTokenCount: COMPLETE's token count differs from the ticket's
	// prompt token count.
	ErrTokenCount = errors.New("kvtransfer: token count mismatch")
	// ErrDuplicate: a frame or byte range arrived twice.
	ErrDuplicate = errors.New("kvtransfer: duplicate frame")
	// ErrOwnerMismatch: the sender's Hello or an shm page header names
	// another owner (tenant, request or LoRA adapter) than the
	// reservation's.
	ErrOwnerMismatch = errors.New("kvtransfer: page owner mismatch")
	// ErrProtocol: a malformed or unexpected message.
	ErrProtocol = errors.New("kvtransfer: protocol violation")
	// ErrAborted: the transfer was aborted by either side.
	ErrAborted = errors.New("kvtransfer: transfer aborted")
	// ErrBusy: another connection is already serving the transfer.
	ErrBusy = errors.New("kvtransfer: transfer already in progress")
	// ErrInvalidTicket: a ticket is malformed.
	ErrInvalidTicket = errors.New("kvtransfer: invalid ticket")
	// ErrSegment: a shared-memory segment is missing, malformed, not ours,
	// or not the one the receiver uses.
	ErrSegment = errors.New("kvtransfer: shared-memory segment mismatch")
)

// codes maps the sentinels to the numbers RESULT and Accept carry; 0 is
// success. Append only.
var codes = [...]error{
	1:  ErrUnauthenticated,
	2:  ErrChecksum,
	3:  ErrIncomplete,
	4:  ErrStaleEpoch,
	5:  ErrTokenCount,
	6:  ErrDuplicate,
	7:  ErrOwnerMismatch,
	8:  ErrProtocol,
	9:  ErrAborted,
	10: ErrBusy,
	11: ErrInvalidTicket,
	12: ErrSegment,
}

// errCode returns the wire code for err (ErrProtocol's when none matches).
func errCode(err error) uint16 {
	for i, e := range codes {
		if e != nil && errors.Is(err, e) {
			return uint16(i)
		}
	}
	return 8
}

// codeErr returns the sentinel for a wire code.
func codeErr(c uint16) error {
	if int(c) < len(codes) && codes[c] != nil {
		return codes[c]
	}
	return ErrProtocol
}
