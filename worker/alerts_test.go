package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/kvpool"
)

// jsonLogs captures a worker's log records (JSON, as in production).
type jsonLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jsonLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// option returns the WithLogger option writing to l.
func (l *jsonLogs) option(t *testing.T) Option {
	logger, err := obs.NewLogger(l, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	return WithLogger(logger)
}

// find returns the records at level whose message contains msg.
func (l *jsonLogs) find(t *testing.T, level, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if m["level"] == level && strings.Contains(m["msg"].(string), msg) {
			out = append(out, m)
		}
	}
	return out
}

// expectError checks that exactly one ERROR record with msg names the
// request, its tenant, the worker and the epoch, plus the given fields.
func (l *jsonLogs) expectError(t *testing.T, msg string, w *started, o *controlpb.Owner, fields ...string) map[string]any {
	t.Helper()
	recs := l.find(t, "ERROR", msg)
	if len(recs) != 1 {
		t.Fatalf("%d ERROR records %q, want 1", len(recs), msg)
	}
	r := recs[0]
	if r[obs.KeyRequestID] != o.RequestId || r[obs.KeyTenant] != o.Tenant || r["worker_id"] != w.id || r["epoch"] != float64(o.Epoch) {
		t.Errorf("ERROR record lacks request, tenant, worker or epoch: %v", r)
	}
	for _, f := range fields {
		if _, ok := r[f]; !ok {
			t.Errorf("ERROR record lacks %s: %v", f, r)
		}
	}
	return r
}

// TestAlertConditions provokes each isolation event the alerts in
// deploy/prometheus/alerts.yml watch, on real workers, and checks that the
// metric the alert reads moves and that an ERROR record names the
// request, tenant, worker and epoch.
func TestAlertConditions(t *testing.T) {
	bg := context.Background()

	t.Run("owner violation", func(t *testing.T) {
		// Decode is handed a page table of another request's pages (the
		// failure I3 guards against): the first forward step refuses it.
		var logs jsonLogs
		s := pd{
			prefill: startWorker(t, testConfig(t, config.RolePrefill, config.TransferTCP, testPages)),
			decode:  startWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages), logs.option(t)),
		}
		victim, thief := owner("tenant-a", "victim", 1), owner("tenant-b", "thief", 1)
		p, sp := prompt(20, 5), greedy(4)
		if _, err := s.decode.client.Reserve(bg, &controlpb.ReserveRequest{Owner: victim, PromptTokens: 20, TotalTokens: 24}); err != nil {
			t.Fatal(err)
		}
		res, err := s.decode.client.Reserve(bg, &controlpb.ReserveRequest{Owner: thief, PromptTokens: 20, TotalTokens: 24})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.prefill.client.Prefill(bg, &controlpb.PrefillRequest{Owner: thief, Prompt: p, Sampling: sp, Ticket: res.GetTicket()}); err != nil {
			t.Fatal(err)
		}
		d := s.decode
		d.mu.Lock()
		victimPages := slices.Clone(d.reqs[reqKey{"tenant-a", "victim"}].pages)
		d.reqs[reqKey{"tenant-b", "thief"}].pages = victimPages
		d.mu.Unlock()
		got := generate(t, d.client, &controlpb.GenerateRequest{Owner: thief, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
		if code(got.err) != codes.Internal || !strings.Contains(got.err.Error(), "kv owner violation") || len(got.tokens) > 0 {
			t.Fatalf("Generate on a foreign page table: %d tokens, %v", len(got.tokens), got.err)
		}
		if v := metricValue(t, d.Worker, "warden_kv_owner_violations_total"); v != 1 {
			t.Errorf("warden_kv_owner_violations_total = %v, want 1", v)
		}
		r := logs.expectError(t, "kv owner violation", d, thief, "page", "reason", "page_owner")
		if page := int32(r["page"].(float64)); !slices.Contains(victimPages, kvpool.PageID(page)) || !strings.Contains(r["page_owner"].(string), "victim") {
			t.Errorf("violation record names page %d of %v, want one of the victim's %v", page, r["page_owner"], victimPages)
		}
		s.abortBoth(t, victim)
		waitQuiet(t, s.prefill, s.decode)
	})

	t.Run("deferred release timeout and quarantine", func(t *testing.T) {
		// Prefill's one-sided writer stalls mid-page; decode aborts and
		// waits for its drain ack for the (short) drain timeout, then
		// quarantines the pages; the late ack releases them.
		var logs jsonLogs
		inj := faults.New(faults.StallShmAfter(tinyPageSize)) // in the second of 3 pages
		dcfg := testConfig(t, config.RoleDecode, config.TransferSHM, testPages)
		dcfg.Worker.Transfer.DrainTimeout = 50 * time.Millisecond
		s := pd{
			prefill: startWorker(t, testConfig(t, config.RolePrefill, config.TransferSHM, testPages), WithTransferFaults(inj)),
			decode:  startWorker(t, dcfg, logs.option(t)),
		}
		o := owner("tenant-a", "stalled", 1)
		ch := s.async(t, bg, bg, o, prompt(40, 6), greedy(4))
		wait(t, inj.Stalled(), "the shm writer to stall")
		if _, err := s.decode.client.Abort(bg, &controlpb.AbortRequest{Owner: o, Cause: "client_disconnect"}); err != nil {
			t.Fatal(err)
		}
		d := s.decode.Worker
		if !poll(30*time.Second, func() bool {
			return metricValue(t, d, "warden_decode_deferred_kv_release_total", "outcome", "timeout") == 1
		}) {
			t.Fatal("no deferred-release timeout counted")
		}
		if q := metricValue(t, d, "warden_kv_pages", "state", "quarantined"); q != 3 {
			t.Errorf("warden_kv_pages{state=quarantined} = %v, want the request's 3 pages", q)
		}
		logs.expectError(t, "kv pages quarantined", s.decode, o, "transfer", "pages", "page_ids")
		inj.Release()
		r := receive(t, ch)
		if r.gen.err == nil || len(r.gen.tokens) > 0 {
			t.Errorf("Generate: %d tokens, %v; want an error and no token", len(r.gen.tokens), r.gen.err)
		}
		if !poll(30*time.Second, func() bool {
			return metricValue(t, d, "warden_decode_deferred_kv_release_total", "outcome", string(kvtransfer.OutcomeLateDrain)) == 1
		}) {
			t.Error("the late drain ack did not release the quarantined pages")
		}
		if _, err := s.prefill.client.Abort(bg, &controlpb.AbortRequest{Owner: o, Cause: "client_disconnect"}); err != nil {
			t.Fatal(err)
		}
		waitQuiet(t, s.prefill, s.decode)
	})

	t.Run("checksum failure", func(t *testing.T) {
		var logs jsonLogs
		inj := faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Corrupt,
			Match: func(e *faults.Event) bool { return e.Frame != nil && e.Frame.Type == "DATA" && e.Page == 1 }})
		s := pd{
			prefill: startWorker(t, testConfig(t, config.RolePrefill, config.TransferTCP, testPages), WithTransferFaults(inj)),
			decode:  startWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages), logs.option(t)),
		}
		o := owner("tenant-a", "corrupted", 1)
		r := s.run(t, nil, o, prompt(40, 7), greedy(4))
		if code(r.gen.err) != codes.DataLoss || len(r.gen.tokens) > 0 {
			t.Fatalf("Generate after a corrupted frame: %d tokens, %v", len(r.gen.tokens), r.gen.err)
		}
		if v := metricValue(t, s.decode.Worker, "warden_transfer_checksum_failures_total"); v != 1 {
			t.Errorf("warden_transfer_checksum_failures_total = %v, want 1", v)
		}
		rec := logs.expectError(t, "integrity check", s.decode, o, "transfer", "err")
		if !strings.Contains(rec["err"].(string), "checksum") {
			t.Errorf("integrity record does not say checksum: %v", rec)
		}
		waitQuiet(t, s.prefill, s.decode)
	})
}
