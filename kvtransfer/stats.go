package kvtransfer

import "sync/atomic"

// ReceiverStats is a snapshot of a Receiver's counters (monotonic except
// Active). The worker exports them as metrics.
type ReceiverStats struct {
	// Connections accepted, and how many failed authentication (bad or
	// missing proof, unknown transfer, garbage, bad frame MAC).
	Connections, AuthFailures uint64
	// Transfers whose handshake was accepted; how they ended.
	Transfers, Completed, Failed uint64
	// Active transfers now.
	Active int
	// Frames: DATA frames accepted (tcp). Bytes: page bytes accepted
	// (tcp: as frames arrive; shm: when a transfer verified).
	Frames, Bytes uint64
	// ChecksumFailures counts frames or pages whose checksum did not match.
	ChecksumFailures uint64
	// StaleFrames: frames of another epoch, or fenced by CheckWrite;
	// UnknownFrames: frames naming another transfer. Both are dropped.
	StaleFrames, UnknownFrames uint64
	// DuplicateFrames: a frame or byte range seen twice.
	DuplicateFrames uint64
	// DrainAcks received for the connection's (transfer, epoch).
	DrainAcks uint64
	// DrainRelays: writer drains reported out of band (WriterDrained)
	// that matched a transfer the receiver still held or tracked.
	DrainRelays uint64
}

type receiverCounters struct {
	connections, authFailures                 atomic.Uint64
	transfers, completed, failed              atomic.Uint64
	frames, bytes, checksumFailures           atomic.Uint64
	staleFrames, unknownFrames, duplicateFrms atomic.Uint64
	drainAcks, drainRelays                    atomic.Uint64
}

func (c *receiverCounters) snapshot() ReceiverStats {
	return ReceiverStats{
		Connections:      c.connections.Load(),
		AuthFailures:     c.authFailures.Load(),
		Transfers:        c.transfers.Load(),
		Completed:        c.completed.Load(),
		Failed:           c.failed.Load(),
		Frames:           c.frames.Load(),
		Bytes:            c.bytes.Load(),
		ChecksumFailures: c.checksumFailures.Load(),
		StaleFrames:      c.staleFrames.Load(),
		UnknownFrames:    c.unknownFrames.Load(),
		DuplicateFrames:  c.duplicateFrms.Load(),
		DrainAcks:        c.drainAcks.Load(),
		DrainRelays:      c.drainRelays.Load(),
	}
}

// SenderStats is a snapshot of a Sender's counters.
type SenderStats struct {
	// Transfers opened, completed (verified by decode), failed or aborted.
	Transfers, Completed, Failed uint64
	// Drains: streams that stopped early and guaranteed no further write;
	// DrainAcks: of those, how many delivered DRAIN_ACK to decode.
	Drains, DrainAcks uint64
	// Frames and page bytes sent (tcp) or written (shm).
	Frames, Bytes uint64
	// Dials: connections opened; the other transfers reused an idle
	// connection to the same decode.
	Dials uint64
}

type senderCounters struct {
	transfers, completed, failed atomic.Uint64
	drains, drainAcks            atomic.Uint64
	frames, bytes                atomic.Uint64
	dials                        atomic.Uint64
}

func (c *senderCounters) snapshot() SenderStats {
	return SenderStats{
		Transfers: c.transfers.Load(),
		Completed: c.completed.Load(),
		Failed:    c.failed.Load(),
		Drains:    c.drains.Load(),
		DrainAcks: c.drainAcks.Load(),
		Frames:    c.frames.Load(),
		Bytes:     c.bytes.Load(),
		Dials:     c.dials.Load(),
	}
}
