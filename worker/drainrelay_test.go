package worker

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/kvtransfer"
)

// The drain relay tests: decode ends an aborted shm transfer's session
// without its DRAIN_ACK — a frame is missing, or the ack is lost with the
// connection — so the pages it parked wait for an ack that cannot come.
// Prefill's Abort answer names the drained transfer, and the gateway's
// relay of it (WriterDrained, played here by the test) releases them.

// dropFrame loses the first frame of type typ that prefill sends.
func dropFrame(typ string) *faults.Injector {
	return faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Drop,
		Match: func(e *faults.Event) bool { return e.Frame != nil && e.Frame.Type == typ }})
}

// prefillDrain aborts o on prefill, as the gateway's fan-out does, and
// returns the drain its answer names, checking it is tk's transfer.
func (lw *lateWrite) prefillDrain(t *testing.T, o *controlpb.Owner, tk *controlpb.Ticket) *controlpb.Drain {
	t.Helper()
	r, err := lw.pre.client.Abort(context.Background(), &controlpb.AbortRequest{Owner: o, Cause: "client_disconnect"})
	if err != nil {
		t.Fatalf("prefill Abort: %v", err)
	}
	d := r.GetDrain()
	if !r.GetDrained() || d.GetTransferId() != tk.GetTransferId() || d.GetEpoch() != o.GetEpoch() {
		t.Fatalf("prefill Abort answered %v, want drained with transfer %s at epoch %d", r, tk.GetTransferId(), o.GetEpoch())
	}
	return d
}

// relay sends WriterDrained to decode as the gateway does and returns
// whether decode applied it.
func (lw *lateWrite) relay(t *testing.T, o *controlpb.Owner, d *controlpb.Drain) bool {
	t.Helper()
	r, err := lw.dec.client.WriterDrained(context.Background(), &controlpb.WriterDrainedRequest{Owner: o, Drain: d})
	if err != nil {
		t.Fatalf("WriterDrained(%v, %v): %v", o, d, err)
	}
	return r.GetApplied()
}

// relays is decode's count of relayed drains with result.
func (lw *lateWrite) relays(t *testing.T, result string) float64 {
	return metricValue(t, lw.dec.Worker, "warden_decode_writer_drain_relays_total", "result", result)
}

// wrongRelays relays drains that do not match A's transfer — another
// epoch (of the request, and of the transfer only), another transfer —
// and checks that none is applied, none is an error and nothing changed
// on decode.
func (lw *lateWrite) wrongRelays(t *testing.T, d *controlpb.Drain) {
	t.Helper()
	before := lw.dec.rt.Pool.Stats()
	heldBefore, quarBefore := lw.dec.receiver.DeferredRelease().Pending()
	nextEpoch := proto.Clone(lw.a).(*controlpb.Owner)
	nextEpoch.Epoch++
	for name, c := range map[string]struct {
		o *controlpb.Owner
		d *controlpb.Drain
	}{
		"the request's next epoch":         {nextEpoch, &controlpb.Drain{TransferId: d.TransferId, Epoch: d.Epoch + 1}},
		"another epoch than the request's": {lw.a, &controlpb.Drain{TransferId: d.TransferId, Epoch: d.Epoch + 1}},
		"another transfer":                 {lw.a, &controlpb.Drain{TransferId: kvtransfer.NewTransferID().String(), Epoch: d.Epoch}},
	} {
		if lw.relay(t, c.o, c.d) {
			t.Errorf("a relayed drain of %s was applied", name)
		}
	}
	if s := lw.dec.rt.Pool.Stats(); s != before {
		t.Errorf("decode pool changed under wrong relays: %+v, was %+v", s, before)
	}
	if held, quar := lw.dec.receiver.DeferredRelease().Pending(); held != heldBefore || quar != quarBefore {
		t.Errorf("deferred releases changed under wrong relays: %d/%d, was %d/%d", held, quar, heldBefore, quarBefore)
	}
	if u, m := lw.relays(t, relayUnknown), lw.relays(t, relayMismatched); u != 2 || m != 1 {
		t.Errorf("wrong relays counted %v unknown, %v mismatched; want 2 and 1", u, m)
	}
}

// TestDrainRelayAfterFrameError: prefill's COMPLETE is lost, so when
// decode aborts the request and prefill drains, its DRAIN_ACK arrives out
// of sequence and decode ends the session on it without accepting it. The
// pages stay held for an ack that cannot come. The relay of prefill's
// drain releases them (outcome drained), a relay for the wrong epoch or
// transfer changes nothing, and a request over the whole pool afterwards
// gets its reference output.
func TestDrainRelayAfterFrameError(t *testing.T) {
	lw := newLateWrite(t, dropFrame("COMPLETE"), time.Hour)
	filler, aTicket, aGen, aPre := lw.fillAndStartA(t)
	if !poll(30*time.Second, func() bool { return lw.inj.Fired(0) == 1 }) {
		t.Fatal("A's COMPLETE was never sent")
	}
	lw.abortOnDecode(t, lw.a) // parks the release; ABORT makes prefill drain
	if got := <-aGen; code(got.err) != codes.Aborted || len(got.tokens) > 0 {
		t.Errorf("A's Generate: %d tokens, %v; want Aborted and no token", len(got.tokens), got.err)
	}
	if err := awaitErr(t, aPre, "A's Prefill"); err == nil {
		t.Error("A's Prefill succeeded after its abort")
	}
	if !poll(30*time.Second, func() bool { return lw.dec.receiver.Stats().Active == 0 }) {
		t.Fatal("decode's session of A did not end")
	}
	if s := lw.dec.receiver.Stats(); s.DrainAcks != 0 {
		t.Fatalf("decode accepted a drain ack: %+v", s)
	}
	if held, _ := lw.dec.receiver.DeferredRelease().Pending(); held != 1 {
		t.Fatalf("deferred releases after the session ended: %d, want A's", held)
	}
	d := lw.prefillDrain(t, lw.a, aTicket)
	lw.wrongRelays(t, d)
	if s := lw.dec.rt.Pool.Stats(); s.Reserved != 8 {
		t.Fatalf("decode pool before the relay: %+v, want the filler's and A's pages held", s)
	}

	if !lw.relay(t, lw.a, d) {
		t.Fatal("the relay of prefill's drain was not applied")
	}
	if v := lw.released(t, kvtransfer.OutcomeDrained); v != 1 {
		t.Errorf("drained releases counted %v, want 1", v)
	}
	if lw.relay(t, lw.a, d) {
		t.Error("a repeated relay was applied again")
	}
	lw.abortOnDecode(t, filler)
	if s := lw.dec.rt.Pool.Stats(); s.Free != s.Total {
		t.Errorf("decode pool after the relay: %+v, want every page free", s)
	}
	lw.runB2(t)
	if v := lw.released(t, kvtransfer.OutcomeTimeout); v != 0 {
		t.Errorf("timeouts counted: %v", v)
	}
	if v := lw.relays(t, relayApplied); v != 1 {
		t.Errorf("applied relays counted %v, want 1", v)
	}
	waitQuiet(t, lw.pre, lw.dec)
}

// TestDrainRelayReleasesQuarantine: prefill's DRAIN_ACK is lost and its
// connection closes, so decode's session ends without it; after the drain
// timeout the pages are quarantined. A relay for the wrong epoch or
// transfer leaves them there; the relay of prefill's drain brings them
// back (outcome late_drain), and a request over the whole pool then gets
// its reference output.
func TestDrainRelayReleasesQuarantine(t *testing.T) {
	lw := newLateWrite(t, dropFrame("DRAIN_ACK"), lateWriteDrain)
	st := lw.pre.stallPush(t, 1) // A's second page
	filler, aTicket, aGen, aPre := lw.fillAndStartA(t)
	wait(t, st.reached, "A's second page push")
	lw.abortOnDecode(t, lw.a) // ABORT: the stream drains, its ack is lost
	if got := <-aGen; code(got.err) != codes.Aborted || len(got.tokens) > 0 {
		t.Errorf("A's Generate: %d tokens, %v; want Aborted and no token", len(got.tokens), got.err)
	}
	if !poll(30*time.Second, func() bool { return lw.released(t, kvtransfer.OutcomeTimeout) == 1 }) {
		t.Fatal("no drain timeout counted")
	}
	d := lw.prefillDrain(t, lw.a, aTicket) // ends the stalled handler
	if err := awaitErr(t, aPre, "A's Prefill"); err == nil {
		t.Error("A's Prefill succeeded after its abort")
	}
	if lw.inj.Fired(0) != 1 {
		t.Fatalf("DRAIN_ACK dropped %d times, want 1", lw.inj.Fired(0))
	}
	lw.abortOnDecode(t, filler)
	if s := lw.dec.rt.Pool.Stats(); s.Quarantined != 4 || s.Free != 4 {
		t.Fatalf("decode pool after the drain timeout: %+v, want A's 4 pages quarantined, 4 free", s)
	}
	lw.wrongRelays(t, d)

	if !lw.relay(t, lw.a, d) {
		t.Fatal("the relay of prefill's drain was not applied")
	}
	if v := lw.released(t, kvtransfer.OutcomeLateDrain); v != 1 {
		t.Errorf("late drains counted %v, want 1", v)
	}
	if s := lw.dec.rt.Pool.Stats(); s.Quarantined != 0 || s.Free != s.Total {
		t.Errorf("decode pool after the relay: %+v, want every page free", s)
	}
	if s := lw.dec.rt.Pool.Stats(); s.Violations != 0 {
		t.Errorf("owner violations on decode: %+v", s)
	}
	lw.runB2(t)
	waitQuiet(t, lw.pre, lw.dec)
}
