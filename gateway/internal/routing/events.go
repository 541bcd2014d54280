package routing

import (
	"fmt"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
)

// MaxReportHashes bounds the hashes one worker report may carry (a worker
// sends at most 4096 per report, kvpool.MaxCacheEvents).
const MaxReportHashes = 1 << 14

// Events is a worker's prefix-cache report in the index's terms.
type Events struct {
	Sealed, Evicted []cachekey.Hash
	// Snapshot: Sealed is everything the worker holds; forget the rest.
	Snapshot bool
}

// EventsFromProto decodes a worker's report, refusing one with more than
// MaxReportHashes hashes or a hash that is not 32 bytes. A nil report is
// no events.
func EventsFromProto(r *controlpb.PrefixCacheReport) (Events, error) {
	if n := len(r.GetSealed()) + len(r.GetEvicted()); n > MaxReportHashes {
		return Events{}, fmt.Errorf("prefix cache report of %d hashes, more than %d", n, MaxReportHashes)
	}
	sealed, err := hashes(r.GetSealed())
	if err != nil {
		return Events{}, fmt.Errorf("prefix cache report: sealed %w", err)
	}
	evicted, err := hashes(r.GetEvicted())
	if err != nil {
		return Events{}, fmt.Errorf("prefix cache report: evicted %w", err)
	}
	return Events{Sealed: sealed, Evicted: evicted, Snapshot: r.GetSnapshot()}, nil
}

func hashes(bs [][]byte) ([]cachekey.Hash, error) {
	out := make([]cachekey.Hash, len(bs))
	for i, b := range bs {
		if len(b) != len(out[i]) {
			return nil, fmt.Errorf("hash %d is %d bytes, want %d", i, len(b), len(out[i]))
		}
		copy(out[i][:], b)
	}
	return out, nil
}
