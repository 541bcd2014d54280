package kvtransfer

import (
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// pushTCP sends a chunk as DATA frames of at most MaxFramePayload bytes,
// each carrying the page's running checksum; called under wmu.
func (st *Stream) pushTCP(page, offset int, data []byte) error {
	for len(data) > 0 {
		piece := data[:min(len(data), st.s.cfg.MaxFramePayload)]
		h := wire.Header{
			Type: wire.Data, TransferID: st.t.TransferID, Epoch: st.t.Owner.Epoch,
			PageIndex: uint32(page), PageID: st.t.Pages[page],
			Offset: uint32(offset), Checksum: st.sum(page, offset, piece),
		}
		if err := st.sendData(&h, page, offset, piece); err != nil {
			return err
		}
		offset += len(piece)
		data = data[len(piece):]
		st.progress[page] = offset
		if offset == st.pageBytes {
			st.sums[page] = h.Checksum
		}
		st.bytes += int64(len(piece))
		st.s.stats.frames.Add(1)
		st.s.stats.bytes.Add(uint64(len(piece)))
	}
	return nil
}

func (st *Stream) sendData(h *wire.Header, page, offset int, payload []byte) error {
	act := faults.None
	if inj := st.s.cfg.Faults; inj != nil {
		act = hitSendFrame(inj, h, page, offset, st.bytes)
	}
	switch act {
	case faults.Drop:
		st.out.seq++ // lost in transit: the sequence number was used
		return nil
	case faults.Corrupt:
		payload = append([]byte(nil), payload...)
		payload[len(payload)/2] ^= 0x5a
	}
	n, err := st.out.write(st.conn, h, payload)
	if err == nil && act == faults.Duplicate {
		n, err = st.out.rewrite(st.conn, payload)
	}
	if err != nil {
		if n > 0 {
			st.broken = true
		}
		return st.writeFailed("writing to decode", err)
	}
	return nil
}
