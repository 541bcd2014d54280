package worker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/kvpool"
)

// TestReclaimQuarantinedOnceNoWriterAttached (issue 16): pages a shm
// writer never acknowledged stay quarantined while any process has decode's
// segment mapped as a writer — here one that carries on writing into them —
// and are reclaimed, zeroed and counted as reclaimed, once it unmapped.
func TestReclaimQuarantinedOnceNoWriterAttached(t *testing.T) {
	cfg := testConfig(t, config.RoleDecode, config.TransferSHM, testPages)
	cfg.Worker.Transfer.DrainTimeout = 20 * time.Millisecond
	cfg.Worker.Transfer.ReclaimQuarantine = true
	w := startWorker(t, cfg)
	writer, err := kvtransfer.OpenSegment(w.segment.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	pool := w.rt.Pool
	o := kvpool.Owner{Tenant: "a", Request: "killed-writer", Epoch: 2}
	pages, err := pool.Reserve(o, 3*pageTokens)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Quarantine(o); err != nil {
		t.Fatal(err)
	}
	late := bytes.Repeat([]byte{0xEE}, tinyPageSize)
	for _, id := range pages {
		copy(writer.Page(int32(id)), late) // late bytes, one-sided
	}
	// The hold decode's Receiver.Abort makes for the transfer, quarantined
	// after the drain timeout.
	if err := w.receiver.DeferredRelease().Hold(kvtransfer.NewTransferID(), o.Epoch,
		func() { w.freePages(context.Background(), o) }, func() {}); err != nil {
		t.Fatal(err)
	}
	if !poll(30*time.Second, func() bool { _, q := w.receiver.DeferredRelease().Pending(); return q == 1 }) {
		t.Fatal("the hold was not quarantined")
	}
	if n := w.reclaimQuarantined(context.Background()); n != 0 {
		t.Fatalf("reclaimed %d transfers while a writer has the segment mapped", n)
	}
	if s := pool.Stats(); s.Quarantined != 3 {
		t.Fatalf("pool with the writer attached: %+v, want 3 quarantined", s)
	}
	for _, id := range pages {
		copy(writer.Page(int32(id)), late) // still writing
	}
	writer.Close()
	if !poll(30*time.Second, func() bool { return pool.Stats().Quarantined == 0 }) {
		t.Fatalf("quarantined pages not reclaimed after the writer unmapped: %+v", pool.Stats())
	}
	for _, id := range pages {
		if !bytes.Equal(pool.Data(id), make([]byte, tinyPageSize)) {
			t.Errorf("reclaimed page %d not zeroed", id)
		}
	}
	if v := metricValue(t, w.Worker, "warden_decode_deferred_kv_release_total", "outcome", "reclaimed"); v != 1 {
		t.Errorf("reclaimed outcomes %v, want 1", v)
	}
	waitQuiet(t, w)
}
