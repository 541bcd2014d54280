package kvtransfer

import (
	"context"

	"github.com/warden-ai/warden/internal/faults"
)

// pushSHM copies data straight into decode's page in shared memory, in
// chunks of at most shmChunk between which it re-checks for abort and
// cancellation, and hashes it while it is still in cache (a whole page in
// one call). Once the page is complete it writes the page header and then
// the seal, which lets decode verify the page while later ones are written
// (see receiver_shm.go). It returns errCanceled when ctx ended.
func (st *Stream) pushSHM(ctx context.Context, page, offset int, data []byte) error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if err := st.checkPush(page, offset, len(data)); err != nil {
		return err
	}
	seg, id, inj, done := st.seg.seg, st.t.Pages[page], st.s.cfg.Faults, ctx.Done()
	dst := seg.Page(id)[offset : offset+len(data)]
	for n := 0; n < len(data); {
		if st.aborted.Load() {
			return st.abortErr()
		}
		select {
		case <-done:
			return errCanceled
		default:
		}
		k := min(len(data)-n, shmChunk)
		if inj != nil {
			inj.Hit(&faults.Event{Point: faults.ShmWrite, Transfer: st.t.TransferID, Epoch: st.t.Owner.Epoch,
				Page: page, Offset: offset + n, Bytes: st.bytes})
		}
		copy(dst[n:n+k], data[n:n+k])
		n += k
		st.progress[page] = offset + n
		st.bytes += int64(k)
	}
	sum := st.sum(page, offset, data)
	st.s.stats.bytes.Add(uint64(len(data)))
	if offset+len(data) < st.pageBytes {
		return nil
	}
	st.sums[page] = sum
	seg.writePageHeader(id, &pageHeader{
		epoch: st.t.Owner.Epoch, transferID: st.t.TransferID, tag: st.tag,
		written: uint64(st.pageBytes), checksum: sum,
	})
	if inj != nil && inj.Hit(&faults.Event{Point: faults.ShmPageDone, Transfer: st.t.TransferID, Epoch: st.t.Owner.Epoch,
		Page: page, Bytes: st.bytes}) == faults.Corrupt {
		p := seg.Page(id)
		p[len(p)/2] ^= 0x5a
	}
	seg.sealPage(id, st.seal)
	return nil
}
