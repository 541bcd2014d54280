package kvtransfer

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// The shm backend: the sender writes pages into decode's shared memory
// itself, and decode accepts a transfer only after it checked every page's
// header and recomputed every page's checksum over its own memory (I4).
//
// To keep that off the critical path, the session verifies pages while the
// sender is still writing later ones. A page is ready once its header
// carries the transfer's seal: the sender writes a page's data, then its
// header, then the seal (atomically, so whoever sees the seal sees the
// header and data), and never writes the page again in this transfer. The
// session finds ready pages by looking at the seals in ticket order — no
// message per page, nothing added to the sender's path — between frames:
// until a frame (COMPLETE, DRAIN_ACK) waits on the connection it verifies
// what is sealed, spinning while the sender makes progress and parking in
// short waits while it does not (prefill computing the next layer). Seeing
// COMPLETE arrive while it runs, rather than being woken for it, also saves
// a thread wakeup per transfer. At COMPLETE only pages not yet reached are
// hashed, spread over the cores when there are many.
//
// The seal is as trustworthy as a frame announcing finished pages would be:
// the segment is private to the worker's user, page headers name the
// transfer (random 128-bit ID) and epoch, and pages of other, aborted
// transfers cannot be written here because their release waits for the
// drain (I5). At COMPLETE every page header is checked again and must list
// the checksum the (authenticated) COMPLETE frame gives.

// parkFor is how long the session waits for a frame before it looks at
// the seals again. (Go's timers sleep at least about a millisecond on
// Linux. Spinning instead measured slower: where cores are few it takes
// the processor from the sender.)
const parkFor = time.Millisecond

// shmVerifier checks an shm transfer's pages as they are sealed.
type shmVerifier struct {
	seg    *Segment
	t      *Ticket
	npages int
	tag    ownerTag
	seal   uint64
	// next is the first page index not yet verified; pages before it were
	// verified with the header checksum in sums.
	next int
	sums []uint64
}

func newShmVerifier(seg *Segment, t *Ticket) *shmVerifier {
	n := t.PromptPages()
	return &shmVerifier{
		seg: seg, t: t, npages: n, tag: tagOf(t.Owner), seal: sealOf(t.TransferID, t.Owner.Epoch),
		sums: make([]uint64, n), next: t.HeldPages,
	}
}

// verifySealed verifies the sealed pages from next on, in order, and
// reports whether it verified any.
func (v *shmVerifier) verifySealed() (bool, error) {
	start := v.next
	for v.next < v.npages && v.seg.sealed(v.t.Pages[v.next], v.seal) {
		sum, err := v.checkPageHeader(v.next)
		if err != nil {
			return false, err
		}
		p := v.t.Pages[v.next]
		if wire.Checksum(v.seg.Page(p)) != sum {
			return false, fmt.Errorf("%w: page %d data does not match its header checksum %016x", ErrChecksum, p, sum)
		}
		v.sums[v.next] = sum
		v.next++
	}
	return v.next > start, nil
}

// checkPageHeader checks page index i's shm page header and returns the
// checksum it records.
func (v *shmVerifier) checkPageHeader(i int) (uint64, error) {
	p := v.t.Pages[i]
	ph, ok := readPageHeader(v.seg.pageHeaderBytes(p))
	switch {
	case !ok || ph.transferID != v.t.TransferID:
		return 0, fmt.Errorf("%w: page index %d (page %d) not written by this transfer", ErrIncomplete, i, p)
	case ph.epoch != v.t.Owner.Epoch:
		return 0, fmt.Errorf("%w: page %d written for epoch %d, transfer is %d", ErrStaleEpoch, p, ph.epoch, v.t.Owner.Epoch)
	case ph.tag != v.tag:
		return 0, fmt.Errorf("%w: page %d", ErrOwnerMismatch, p)
	case int64(ph.written) != v.t.PageBytes || ph.seal != v.seal:
		return 0, fmt.Errorf("%w: page %d has %d of %d bytes", ErrIncomplete, p, ph.written, v.t.PageBytes)
	}
	return ph.checksum, nil
}

// pump verifies pages as they are sealed until a frame waits on the
// connection, every page is verified, or deadline passes. Without a way to
// watch the socket (TLS, which may buffer records, or a connection that is
// not a socket) it verifies what is sealed now and leaves the rest to
// COMPLETE.
func (s *session) pump(deadline time.Time) error {
	v := s.shm
	if s.watch == nil {
		_, err := v.verifySealed()
		return err
	}
	for v.next < v.npages {
		if _, err := v.verifySealed(); err != nil {
			return err
		}
		now := time.Now()
		if !now.Before(deadline) || s.watch.waitReadable(s.conn, earliest(deadline, now.Add(parkFor))) {
			return nil
		}
	}
	return nil
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// verifySHM checks, for every page the transfer carries, that it is still reserved for the
// transfer, that its page header names this transfer, epoch and owner with
// every byte written and the checksum COMPLETE gives, and that the data in
// decode's memory has that checksum. Pages verified while the sender was
// writing, with the same header checksum, are not hashed again.
func (s *session) verifySHM(c wire.CompletePayload) error {
	v := s.shm
	var pages []int32
	var want []uint64
	for i := s.t.HeldPages; i < s.npages; i++ {
		p := s.t.Pages[i]
		if err := s.r.sink.CheckWrite(s.t, p); err != nil {
			return fmt.Errorf("%w: page %d fenced: %w", ErrStaleEpoch, p, err)
		}
		sum, err := v.checkPageHeader(i)
		if err != nil {
			return err
		}
		if sum != c.Checksums[i] {
			return fmt.Errorf("%w: page %d header %016x, COMPLETE %016x", ErrChecksum, p, sum, c.Checksums[i])
		}
		if i >= v.next || v.sums[i] != sum {
			pages, want = append(pages, p), append(want, sum)
		}
	}
	if i := firstBadPage(v.seg, pages, want); i >= 0 {
		return fmt.Errorf("%w: page %d data does not match the sender's checksum %016x", ErrChecksum, pages[i], want[i])
	}
	return nil
}

// parallelVerify is how many bytes of pages make it worth hashing them on
// several goroutines at COMPLETE: waking another thread costs tens of
// microseconds on a virtual machine, a few MiB of hashing as much.
const parallelVerify = 4 << 20

// firstBadPage recomputes the checksum of every page in decode's memory,
// spread over up to GOMAXPROCS goroutines (the caller being one) when
// there is enough of it, and returns the index of a page that does not
// match want, or -1.
func firstBadPage(seg *Segment, pages []int32, want []uint64) int {
	var next atomic.Int64
	bad := atomic.Int64{}
	bad.Store(-1)
	work := func() {
		for bad.Load() < 0 {
			i := int(next.Add(1) - 1)
			if i >= len(pages) {
				return
			}
			if wire.Checksum(seg.Page(pages[i])) != want[i] {
				bad.CompareAndSwap(-1, int64(i))
			}
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(pages)*seg.PageBytes()/parallelVerify) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return int(bad.Load())
}
