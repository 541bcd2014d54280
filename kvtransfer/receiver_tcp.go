package kvtransfer

import (
	"fmt"
	"io"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// The tcp backend: decode is the only writer. Each DATA frame is fenced
// (Sink.CheckWrite right before the copy), read from the socket straight
// into its page and hashed there while it is in cache.

// data copies one DATA frame from the connection straight into its page,
// fenced: the page must be reserved for the transfer's (request, epoch)
// right before the copy, and Abort waits for a copy in flight.
func (s *session) data(h wire.Header) error {
	idx := int(h.PageIndex)
	pb := uint64(s.t.PageBytes)
	switch {
	case idx >= s.npages:
		return fmt.Errorf("%w: page index %d of %d", ErrProtocol, idx, s.npages)
	case idx < s.t.HeldPages:
		return fmt.Errorf("%w: page index %d is one of the %d pages decode holds", ErrProtocol, idx, s.t.HeldPages)
	case h.PageID != s.t.Pages[idx]:
		return fmt.Errorf("%w: page index %d is page %d, frame says %d", ErrProtocol, idx, s.t.Pages[idx], h.PageID)
	case uint64(h.Offset)+uint64(h.Length) > pb:
		return fmt.Errorf("%w: bytes [%d,+%d) beyond page size %d", ErrProtocol, h.Offset, h.Length, pb)
	case h.Offset < s.progress[idx]:
		s.r.stats.duplicateFrms.Add(1)
		return fmt.Errorf("%w: page %d bytes from %d again (have %d)", ErrDuplicate, idx, h.Offset, s.progress[idx])
	case h.Offset > s.progress[idx]:
		return fmt.Errorf("%w: page %d bytes [%d,%d) missing", ErrIncomplete, idx, s.progress[idx], h.Offset)
	}
	sum, err := s.copyIn(h)
	if err != nil {
		return err
	}
	if sum != h.Checksum {
		s.r.stats.checksumFailures.Add(1)
		return fmt.Errorf("%w: page %d bytes [%d,%d)", ErrChecksum, idx, h.Offset, h.Offset+h.Length)
	}
	s.progress[idx] += h.Length
	if uint64(s.progress[idx]) == pb {
		s.sums[idx] = sum
	}
	s.r.stats.frames.Add(1)
	s.r.stats.bytes.Add(uint64(h.Length))
	return nil
}

// copyIn reads the frame payload into the page under the write lock and
// returns the page's running checksum through the end of the frame.
func (s *session) copyIn(h wire.Header) (uint64, error) {
	rec := s.rec
	rec.wmu.Lock()
	defer rec.wmu.Unlock()
	if rec.aborted.Load() {
		return 0, fmt.Errorf("%w: by decode", ErrAborted)
	}
	if err := s.r.sink.CheckWrite(s.t, h.PageID); err != nil {
		s.r.stats.staleFrames.Add(1)
		return 0, fmt.Errorf("%w: page %d fenced: %w", ErrStaleEpoch, h.PageID, err)
	}
	page := s.r.sink.PageData(h.PageID)
	if int64(len(page)) != s.t.PageBytes {
		return 0, fmt.Errorf("%w: sink returned %d bytes for page %d, want %d", ErrProtocol, len(page), h.PageID, s.t.PageBytes)
	}
	dst := page[h.Offset : h.Offset+h.Length]
	if _, err := io.ReadFull(s.rd, dst); err != nil {
		if rec.aborted.Load() {
			return 0, fmt.Errorf("%w: by decode", ErrAborted)
		}
		return 0, fmt.Errorf("%w: connection: %w", ErrIncomplete, err)
	}
	return s.hashers.Add(int(h.PageIndex), int(h.Offset), dst), nil
}

// verifyTCP checks at COMPLETE that every page the transfer carries
// arrived whole with the checksum the sender lists.
func (s *session) verifyTCP(c wire.CompletePayload) error {
	for i := s.t.HeldPages; i < s.npages; i++ {
		if int64(s.progress[i]) != s.t.PageBytes {
			return fmt.Errorf("%w: page index %d has %d of %d bytes", ErrIncomplete, i, s.progress[i], s.t.PageBytes)
		}
		if s.sums[i] != c.Checksums[i] {
			return fmt.Errorf("%w: page index %d: received %016x, sender says %016x", ErrChecksum, i, s.sums[i], c.Checksums[i])
		}
	}
	return nil
}
