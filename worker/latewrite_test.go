package worker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/kvtransfer"
)

// The late-write tests (I5) run on a decode pool of lateWritePages pages:
// a filler reservation and the aborted request fill it, so that once the
// filler is gone the free pages are the filler's — and, if the aborted
// request's pages were released at once, those too, first in line (the
// pool reuses the page free longest).
const (
	lateWritePages = 8
	lateWriteDrain = 300 * time.Millisecond // decode's drain timeout in the quarantine variant
)

// lateWrite is one scenario's workers, requests and references.
type lateWrite struct {
	pre, dec *started
	inj      *faults.Injector

	// The aborted request: two prompt pages in a four-page reservation.
	a       *controlpb.Owner
	aPrompt []int32
	// b1 fits the pages left free; b2 needs the whole pool.
	b1Prompt, b2Prompt []int32
	b1Samp, b2Samp     *controlpb.SamplingParams
	b1Ref, b2Ref       reference
}

func newLateWrite(t *testing.T, inj *faults.Injector, drain time.Duration) *lateWrite {
	t.Helper()
	lw := &lateWrite{
		inj:      inj,
		a:        owner("tenant-a", "aborted", 1),
		aPrompt:  prompt(20, 31),
		b1Prompt: prompt(40, 32), b1Samp: greedy(24), // 64 tokens: 4 pages
		b2Prompt: prompt(100, 33), b2Samp: greedy(28), // 128 tokens: the whole pool
	}
	lw.b1Ref = runReference(t, [][]int32{lw.b1Prompt}, lw.b1Samp)[0]
	lw.b2Ref = runReference(t, [][]int32{lw.b2Prompt}, lw.b2Samp)[0]
	lw.pre = startWorker(t, testConfig(t, config.RolePrefill, config.TransferSHM, 16), WithTransferFaults(inj))
	dcfg := testConfig(t, config.RoleDecode, config.TransferSHM, lateWritePages)
	dcfg.Worker.Transfer.DrainTimeout = drain
	lw.dec = startWorker(t, dcfg)
	// Registered after the workers, so it runs before they stop: a writer
	// still stalled would hold shutdown up.
	t.Cleanup(inj.Release)
	return lw
}

// reserve reserves on decode and returns the ticket.
func (lw *lateWrite) reserve(t *testing.T, o *controlpb.Owner, promptTokens, total int) *controlpb.Ticket {
	t.Helper()
	res, err := lw.dec.client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: o, PromptTokens: int64(promptTokens), TotalTokens: int64(total)})
	if err != nil {
		t.Fatalf("Reserve %s: %v", o.RequestId, err)
	}
	return res.GetTicket()
}

// start sends Generate on decode and Prefill on prefill, as the gateway
// does, and returns their results on channels.
func (lw *lateWrite) start(t *testing.T, o *controlpb.Owner, p []int32, sp *controlpb.SamplingParams, tk *controlpb.Ticket) (<-chan outcome, <-chan error) {
	gen, pre := make(chan outcome, 1), make(chan error, 1)
	go func() {
		_, err := lw.pre.client.Prefill(context.Background(), &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: tk})
		pre <- err
	}()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stream, err := lw.dec.client.Generate(ctx, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: tk})
		gen <- collect(t, stream, err)
	}()
	return gen, pre
}

// fillAndStartA reserves the filler and request A (the pool is then full),
// and starts A's Prefill and Generate.
func (lw *lateWrite) fillAndStartA(t *testing.T) (filler *controlpb.Owner, aTicket *controlpb.Ticket, aGen <-chan outcome, aPre <-chan error) {
	t.Helper()
	filler = owner("tenant-f", "filler", 1)
	lw.reserve(t, filler, 1, 4*pageTokens)
	aTicket = lw.reserve(t, lw.a, len(lw.aPrompt), 4*pageTokens)
	if s := lw.dec.rt.Pool.Stats(); s.Free != 0 {
		t.Fatalf("decode pool after filler and A: %+v, want no free page", s)
	}
	aGen, aPre = lw.start(t, lw.a, lw.aPrompt, greedy(4*pageTokens-int32(len(lw.aPrompt))), aTicket)
	return filler, aTicket, aGen, aPre
}

// abortOnDecode aborts o on decode (the gateway's fence) and checks it was
// found.
func (lw *lateWrite) abortOnDecode(t *testing.T, o *controlpb.Owner) {
	t.Helper()
	r, err := lw.dec.client.Abort(context.Background(), &controlpb.AbortRequest{Owner: o, Cause: "client_disconnect"})
	if err != nil || !r.GetFound() {
		t.Fatalf("decode Abort %s: %v, %v", o.RequestId, r, err)
	}
}

// abortOnPrefill aborts o on prefill, as the gateway does alongside the
// decode abort. The call returns once the writer drained, which a stalled
// writer or drain ack holds up: its result comes on the channel.
func (lw *lateWrite) abortOnPrefill(o *controlpb.Owner) <-chan error {
	done := make(chan error, 1)
	go func() {
		r, err := lw.pre.client.Abort(context.Background(), &controlpb.AbortRequest{Owner: o, Cause: "client_disconnect"})
		if err == nil && !r.GetDrained() {
			err = errors.New("prefill Abort returned without drained")
		}
		done <- err
	}()
	return done
}

// awaitErr waits for a call's result.
func awaitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// runB1 runs B1 (another tenant) on the pages the filler left and checks
// they are not the aborted request's. Its prefill stalls before its last
// prompt page; during is called then, when B1's first pages are in
// decode's pool and verified.
func (lw *lateWrite) runB1(t *testing.T, aTicket *controlpb.Ticket, during func()) {
	t.Helper()
	b1 := owner("tenant-b", "next-owner", 1)
	tk := lw.reserve(t, b1, len(lw.b1Prompt), len(lw.b1Prompt)+int(lw.b1Samp.MaxTokens))
	for _, p := range tk.Pages {
		if slices.Contains(aTicket.Pages, p) {
			t.Errorf("B1 got page %d of the aborted request's %v before its writer drained (B1: %v)", p, aTicket.Pages, tk.Pages)
		}
	}
	st := lw.pre.stallPush(t, 2) // B1's third and last prompt page; A has only two
	gen, pre := lw.start(t, b1, lw.b1Prompt, lw.b1Samp, tk)
	wait(t, st.reached, "B1's last page push")
	during()
	st.unblock()
	if err := <-pre; err != nil {
		t.Errorf("B1 Prefill: %v", err)
	}
	checkAgainst(t, "B1, decoded while A's late write landed", <-gen, lw.b1Ref)
}

// runB2 runs a request over the whole pool, the aborted request's old
// pages included: the late bytes left in them must not show.
func (lw *lateWrite) runB2(t *testing.T) {
	t.Helper()
	b2 := owner("tenant-c", "whole-pool", 1)
	tk := lw.reserve(t, b2, len(lw.b2Prompt), len(lw.b2Prompt)+int(lw.b2Samp.MaxTokens))
	gen, pre := lw.start(t, b2, lw.b2Prompt, lw.b2Samp, tk)
	if err := <-pre; err != nil {
		t.Errorf("B2 Prefill: %v", err)
	}
	checkAgainst(t, "B2 over the whole pool", <-gen, lw.b2Ref)
}

// released is decode's count of deferred releases with outcome o.
func (lw *lateWrite) released(t *testing.T, o kvtransfer.Outcome) float64 {
	return metricValue(t, lw.dec.Worker, "warden_decode_deferred_kv_release_total", "outcome", string(o))
}

// TestLateShmWriteAfterAbort (I5): prefill's one-sided writer is stalled
// inside its shm write section when the request is aborted; decode fences
// and parks the pages. Another tenant's request reserves and transfers
// while the stalled writer is released and its late bytes land: the next
// owner never gets the aborted request's pages, its output equals the
// reference, and the pages are released only on the drain ack, counted
// as drained. A request over the whole pool afterwards is unaffected by
// the late bytes.
func TestLateShmWriteAfterAbort(t *testing.T) {
	// The first chunk written after page 0 (the whole second page) stalls.
	lw := newLateWrite(t, faults.New(faults.StallShmAfter(tinyPageSize)), 10*time.Second)
	filler, aTicket, aGen, aPre := lw.fillAndStartA(t)
	wait(t, lw.inj.Stalled(), "A's shm writer to stall mid-transfer")
	lw.abortOnDecode(t, lw.a)
	preAbort := lw.abortOnPrefill(lw.a) // returns once the stalled writer drained
	if got := <-aGen; code(got.err) != codes.Aborted || len(got.tokens) > 0 {
		t.Errorf("A's Generate: %d tokens, %v; want Aborted and no token", len(got.tokens), got.err)
	}
	if held, _ := lw.dec.receiver.DeferredRelease().Pending(); held != 1 {
		t.Errorf("deferred releases after the abort: %d, want A's", held)
	}
	lw.abortOnDecode(t, filler) // never transferred: freed at once
	if s := lw.dec.rt.Pool.Stats(); s.Free != 4 || s.Reserved != 4 {
		t.Errorf("decode pool with A's release deferred: %+v, want the filler's 4 pages free and A's 4 held", s)
	}

	lw.runB1(t, aTicket, func() {
		lw.inj.Release() // the late write lands now, then the writer drains
		if err := awaitErr(t, aPre, "A's Prefill"); err == nil {
			t.Error("A's Prefill succeeded after its abort")
		}
		if err := awaitErr(t, preAbort, "the prefill Abort"); err != nil {
			t.Errorf("prefill Abort: %v", err)
		}
		if !poll(30*time.Second, func() bool { return lw.released(t, kvtransfer.OutcomeDrained) == 1 }) {
			t.Errorf("A's pages were not released on its drain ack (drained %v, immediate %v)",
				lw.released(t, kvtransfer.OutcomeDrained), lw.released(t, kvtransfer.OutcomeImmediate))
		}
	})
	lw.runB2(t)
	if v := lw.released(t, kvtransfer.OutcomeTimeout); v != 0 {
		t.Errorf("timeouts counted: %v", v)
	}
	if s := lw.dec.rt.Pool.Stats(); s.Violations != 0 {
		t.Errorf("owner violations on decode: %+v", s)
	}
	waitQuiet(t, lw.pre, lw.dec)
}

// TestDrainAckNeverComesQuarantines (I5): the aborted transfer's drain ack
// is held back; after worker.transfer.drain_timeout decode quarantines the
// pages (counted as timeout) and does not reuse them — a request that
// needs them is refused, one that fits elsewhere gets other pages and its
// reference output — until the ack finally arrives (late_drain) and frees
// them.
func TestDrainAckNeverComesQuarantines(t *testing.T) {
	lw := newLateWrite(t, faults.New(faults.StallFrame("DRAIN_ACK")), lateWriteDrain)
	st := lw.pre.stallPush(t, 1) // A's second page
	filler, aTicket, aGen, aPre := lw.fillAndStartA(t)
	wait(t, st.reached, "A's second page push")
	lw.abortOnDecode(t, lw.a)
	// The prefill abort ends the stalled push; the stream drains without
	// writing more, and its drain ack is held.
	preAbort := lw.abortOnPrefill(lw.a)
	if got := <-aGen; code(got.err) != codes.Aborted || len(got.tokens) > 0 {
		t.Errorf("A's Generate: %d tokens, %v; want Aborted and no token", len(got.tokens), got.err)
	}
	if !poll(30*time.Second, func() bool { return lw.released(t, kvtransfer.OutcomeTimeout) == 1 }) {
		t.Fatalf("no drain timeout counted")
	}
	lw.abortOnDecode(t, filler)
	if s := lw.dec.rt.Pool.Stats(); s.Quarantined != 4 || s.Free != 4 {
		t.Fatalf("decode pool after the drain timeout: %+v, want A's 4 pages quarantined, 4 free", s)
	}
	// Not reused while quarantined: the whole pool cannot be reserved.
	_, err := lw.dec.client.Reserve(context.Background(), &controlpb.ReserveRequest{
		Owner: owner("tenant-c", "too-early", 1), PromptTokens: 100, TotalTokens: lateWritePages * pageTokens})
	if code(err) != codes.ResourceExhausted {
		t.Errorf("Reserve of the whole pool with 4 pages quarantined: %v, want ResourceExhausted", err)
	}
	lw.runB1(t, aTicket, func() {})
	if s := lw.dec.rt.Pool.Stats(); s.Quarantined != 4 {
		t.Errorf("quarantine lifted without a drain ack: %+v", s)
	}

	lw.inj.Release() // the ack arrives, late
	if err := awaitErr(t, aPre, "A's Prefill"); err == nil {
		t.Error("A's Prefill succeeded after its abort")
	}
	if err := awaitErr(t, preAbort, "the prefill Abort"); err != nil {
		t.Errorf("prefill Abort: %v", err)
	}
	if !poll(30*time.Second, func() bool { return lw.released(t, kvtransfer.OutcomeLateDrain) == 1 }) {
		t.Errorf("the late drain ack did not release the quarantined pages: %+v", lw.dec.rt.Pool.Stats())
	}
	lw.runB2(t)
	if v := lw.released(t, kvtransfer.OutcomeDrained); v != 0 {
		t.Errorf("drained counted %v, want 0 (the ack came after the timeout)", v)
	}
	waitQuiet(t, lw.pre, lw.dec)
}
