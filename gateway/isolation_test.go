package gateway

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/worker"
)

// The tiny model's KV pages hold 16 tokens.
const pdPageTokens = 16

var backends = []config.TransferBackend{config.TransferTCP, config.TransferSHM}

// startPD starts a gateway with cfg, a decode and a prefill worker over
// backend with pools of decodePages and prefillPages pages; prefillOpts go
// to the prefill worker.
func startPD(t *testing.T, cfg *config.Config, backend config.TransferBackend, decodePages, prefillPages int, prefillOpts ...worker.Option) (tg *testGateway, decode, prefill *pdWorker) {
	t.Helper()
	return startPDWith(t, cfg, backend, decodePages, prefillPages, nil, prefillOpts...)
}

// startPDWith is startPD with configure, if set, applied to the decode
// worker's config.
func startPDWith(t *testing.T, cfg *config.Config, backend config.TransferBackend, decodePages, prefillPages int,
	configure func(decode *config.Config), prefillOpts ...worker.Option) (tg *testGateway, decode, prefill *pdWorker) {
	t.Helper()
	tg = startGateway(t, cfg)
	reg := tg.RegistryAddr().String()
	n := realN.Add(1)
	dcfg := workerConfig(t, fmt.Sprintf("decode-%s-%d", backend, n), config.RoleDecode, backend, reg)
	pcfg := workerConfig(t, fmt.Sprintf("prefill-%s-%d", backend, n), config.RolePrefill, backend, reg)
	dcfg.Worker.KV.MemoryBytes = config.ByteSize(decodePages * tinyPageBytes)
	pcfg.Worker.KV.MemoryBytes = config.ByteSize(prefillPages * tinyPageBytes)
	if configure != nil {
		configure(dcfg)
	}
	decode = startPDWorker(t, tg, dcfg)
	prefill = startPDWorker(t, tg, pcfg, prefillOpts...)
	waitFor(t, "the model to be served", func() bool { return tg.Ready() == nil })
	return tg, decode, prefill
}

// wentThroughPD checks that every request the gateway finished ran on the
// prefill and decode worker.
func wentThroughPD(t *testing.T, tg *testGateway, decode, prefill *pdWorker) {
	t.Helper()
	for _, s := range tg.table.List() {
		if v := requestView(s); s.State == lifecycle.Completed && (v.PrefillWorker != prefill.id || v.DecodeWorker != decode.id) {
			t.Errorf("request %+v did not go through P/D", v)
		}
	}
}

// TestPDMatchesSingleWorkerAcrossLengths: through the gateway, a prompt of
// every length around the page boundaries, and the longest that fits the
// model's window,
// gives over P/D (tcp and shm) exactly what a single both worker gives:
// text, finish reason and usage, streamed and not.
func TestPDMatchesSingleWorkerAcrossLengths(t *testing.T) {
	const maxTokens = 8
	pt := newPromptText(t)
	ref := newRefWorker(t, workerPages)
	cfg := testConfig()
	if raceEnabled {
		cfg.Models[0].ContextLength /= 2 // see incidentGeometry
	}
	limit := cfg.Models[0].ContextLength // at most the pools' capacity
	// The shortest prompt is BOS and one token: an empty prompt is a 400.
	lens := []int{2, pdPageTokens - 1, pdPageTokens, pdPageTokens + 1, 2*pdPageTokens - 1, 2 * pdPageTokens, 2*pdPageTokens + 1, limit - maxTokens}
	type probe struct {
		n    int
		text string
		ref  reference
	}
	probes := make([]probe, len(lens))
	for i, n := range lens {
		text, ids := pt.text(t, n, uint64(i))
		probes[i] = probe{n: n, text: text, ref: ref.run(ids, maxTokens)}
		if probes[i].ref.completion == 0 {
			t.Fatalf("empty reference for %d tokens", n)
		}
	}
	for _, backend := range backends {
		t.Run(string(backend), func(t *testing.T) {
			// Prefill gets room for two of the longest prompts (see
			// TestMarkedPromptsNeverGetForeignContent).
			tg, decode, prefill := startPD(t, cfg, backend, workerPages, 2*workerPages)
			for i, p := range probes {
				modes := []bool{false, true}
				if i == len(probes)-1 {
					modes = []bool{backend == config.TransferSHM} // the longest: once per backend
				}
				for _, stream := range modes {
					res := completion{tg: tg, key: tg.key, prompt: p.text, max: maxTokens, stream: stream}.do(context.Background())
					if !res.complete(stream) {
						t.Errorf("prompt of %d tokens (stream %v): %v", p.n, stream, res)
						continue
					}
					if diff := res.matchesRef(p.ref); diff != "" || res.usage.PromptTokens != int64(p.n) {
						t.Errorf("prompt of %d tokens (stream %v): %s (prompt tokens %d)", p.n, stream, diff, res.usage.PromptTokens)
					}
				}
			}
			wentThroughPD(t, tg, decode, prefill)
			decode.settled()
			prefill.settled()
		})
	}
}

// Abort kinds of the stress test.
const (
	kindComplete     = "complete"      // must complete with its reference
	kindDisconnect   = "disconnect"    // client goes away mid-stream
	kindEarlyGone    = "early_gone"    // client gives up before the first byte
	kindAdminWait    = "admin"         // admin abort while the request is held at a stage
	kindAdminRace    = "admin_race"    // admin abort racing the request
	kindDeadline     = "deadline"      // held at a stage until its deadline
	kindPrefillAbort = "prefill_abort" // prefill told to abort, racing its Prefill
)

// stressPlan is one request of the stress test.
type stressPlan struct {
	id     string // x-client-request-id
	kind   string
	hook   string // "prefill" (before Prefill is sent), "ready" (decoding) or "none"
	tenant int
	prompt int
	stream bool
	delay  time.Duration
	ready  chan struct{} // disconnect at "ready": closed when the hook holds the request
}

// TestPDStressWithAborts: several tenants in parallel send requests of
// mixed lengths over P/D (tcp and shm) while requests are aborted at
// random stages by every cause — client disconnect mid-stream and before
// the first byte, admin abort, deadline, prefill-side abort. Every
// response that looks complete equals its reference and belongs to a
// completed request; every request that did not complete got an error;
// afterwards both workers' pools balance with nothing reserved.
func TestPDStressWithAborts(t *testing.T) {
	const perBackend, parallel, deadlines = 150, 8, 4
	pt := newPromptText(t)
	ref := newRefWorker(t, workerPages)
	type prompt struct {
		text string
		max  int
		ref  reference
	}
	var prompts []prompt
	for i, n := range []int{2, 5, 15, 16, 17, 23, 31, 32, 33, 40, 47, 64} { // 2: BOS and one token, the shortest prompt
		text, ids := pt.text(t, n, uint64(100+i))
		max := 4 + 2*(i%3)
		prompts = append(prompts, prompt{text, max, ref.run(ids, max)})
	}
	total := map[string]int{}
	for _, backend := range backends {
		t.Run(string(backend), func(t *testing.T) {
			cfg := testConfig()
			cfg.Gateway.TrustClientRequestID = true
			cfg.Gateway.RequestTimeout = 4 * time.Second
			cfg.Gateway.Queue = config.Queue{MaxWaiting: 4 * perBackend, MaxWait: 30 * time.Second}
			tg, decode, prefill := startPD(t, cfg, backend, workerPages, workerPages)
			keys := []string{tg.key}
			for i := 1; i < 4; i++ {
				keys = append(keys, newTenantKey(t, tg, fmt.Sprint("tenant-", i)))
			}

			rng := rand.New(rand.NewPCG(7, 8)) // the same plan over both backends
			plans := make(map[string]stressPlan, perBackend)
			var order []stressPlan
			for i := range perBackend {
				p := stressPlan{id: fmt.Sprintf("%s-%03d", backend, i), tenant: rng.IntN(len(keys)), prompt: rng.IntN(len(prompts)),
					stream: rng.IntN(2) == 0, hook: []string{"prefill", "ready"}[rng.IntN(2)],
					delay: time.Duration(rng.IntN(3000)) * time.Microsecond}
				switch r := rng.IntN(100); {
				case i < deadlines:
					p.kind = kindDeadline
				case r < 50:
					p.kind = kindComplete
				case r < 60:
					// Held after decode is ready until the client left, or
					// leaving after the first content.
					p.kind, p.stream, p.hook = kindDisconnect, true, []string{"ready", "none"}[rng.IntN(2)]
					p.ready = make(chan struct{})
				case r < 70:
					p.kind, p.delay = kindEarlyGone, time.Duration(rng.IntN(20000))*time.Microsecond
				case r < 77:
					p.kind = kindAdminWait
				case r < 85:
					p.kind = kindAdminRace
				default:
					p.kind, p.hook = kindPrefillAbort, "prefill"
				}
				plans[p.id] = p
				order = append(order, p)
			}

			// The hooks find a request's plan by its client request ID.
			planOf := func(ctx context.Context) (stressPlan, string, string) {
				id, tenantID := obs.RequestFromContext(ctx)
				s, _ := tg.table.Get(id)
				return plans[s.ClientRequestID], id, tenantID
			}
			hook := func(stage string) func(ctx context.Context) {
				return func(ctx context.Context) {
					p, id, tenantID := planOf(ctx)
					if p.hook != stage {
						return
					}
					switch p.kind {
					case kindDeadline:
						<-ctx.Done()
					case kindDisconnect:
						close(p.ready)
						<-ctx.Done()
					case kindAdminWait:
						go adminAbort(tg, id)
						<-ctx.Done()
					case kindAdminRace:
						go func() { time.Sleep(p.delay); adminAbort(tg, id) }()
					case kindPrefillAbort:
						go func() {
							time.Sleep(p.delay)
							_, _ = prefill.client.Abort(context.Background(), &controlpb.AbortRequest{
								Owner: &controlpb.Owner{Tenant: tenantID, RequestId: id, Epoch: lifecycle.Epoch}, Cause: "test_prefill_abort"})
						}()
					}
				}
			}
			beforePrefill, afterReady := hook("prefill"), hook("ready")
			tg.hooks.beforePrefill.Store(&beforePrefill)
			tg.hooks.afterReady.Store(&afterReady)
			t.Cleanup(func() { tg.hooks.beforePrefill.Store(nil); tg.hooks.afterReady.Store(nil) })

			results := make(map[string]apiResult, perBackend)
			var mu sync.Mutex
			run := func(p stressPlan) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				switch {
				case p.kind == kindEarlyGone:
					ctx, cancel = context.WithTimeout(ctx, p.delay)
					defer cancel()
				case p.kind == kindDisconnect && p.hook == "ready":
					go func() {
						select {
						case <-p.ready:
							cancel()
						case <-ctx.Done():
						}
					}()
				}
				c := completion{tg: tg, key: keys[p.tenant], clientID: p.id, prompt: prompts[p.prompt].text, max: prompts[p.prompt].max, stream: p.stream}
				if p.kind == kindDisconnect && p.hook == "none" {
					c.onChunk = func(n int) {
						if n > 0 {
							cancel()
						}
					}
				}
				res := c.do(ctx)
				mu.Lock()
				results[p.id] = res
				mu.Unlock()
			}
			start := time.Now()
			var wg sync.WaitGroup
			queue := make(chan stressPlan)
			for _, p := range order[:deadlines] { // they wait out the deadline side by side
				wg.Go(func() { run(p) })
			}
			for range parallel {
				wg.Go(func() {
					for p := range queue {
						run(p)
					}
				})
			}
			for _, p := range order[deadlines:] {
				queue <- p
			}
			close(queue)
			wg.Wait()
			elapsed := time.Since(start)

			waitFor(t, "every request to end", func() bool { return tg.table.InFlight() == 0 })
			snaps := map[string]lifecycle.Snapshot{}
			for _, s := range tg.table.List() {
				snaps[s.ClientRequestID] = s
			}
			counts := map[string]int{}
			for _, p := range order {
				res, s := results[p.id], snaps[p.id]
				want := prompts[p.prompt].ref
				what := fmt.Sprintf("%s (%s, hook %s, stream %v)", p.id, p.kind, p.hook, p.stream)
				if s.ID == "" && p.kind == kindEarlyGone && res.transport != nil {
					counts["unsent    (the client gave up before sending)"]++
					continue
				}
				if !s.State.Terminal() {
					t.Errorf("%s: no terminal request in the table: %+v; client %v", what, s, res)
					continue
				}
				counts[fmt.Sprintf("%-9s %-18s at %s", s.State, s.Cause, s.Stage)]++
				switch complete := res.complete(p.stream); {
				case complete && s.State != lifecycle.Completed:
					t.Errorf("%s: a complete-looking response for a request that ended %s/%s: %v", what, s.State, s.Cause, res)
				case complete:
					if diff := res.matchesRef(want); diff != "" {
						t.Errorf("%s: %s", what, diff)
					}
				case res.transport == nil && res.status == http.StatusOK && res.errCode == "":
					t.Errorf("%s: an unfinished response without an error: %v", what, res)
				case res.transport == nil && s.State == lifecycle.Completed:
					t.Errorf("%s: an error for a request that completed: %v", what, res)
				}
				switch p.kind {
				case kindComplete:
					if !res.complete(p.stream) {
						t.Errorf("%s: did not complete: %v; request %s/%s", what, res, s.State, s.Cause)
					}
				case kindDeadline:
					if s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseDeadline || res.errCode != "timeout" {
						t.Errorf("%s: request %s/%s, client %v", what, s.State, s.Cause, res)
					}
				case kindAdminWait:
					if s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseAdmin || res.errCode != "request_aborted" {
						t.Errorf("%s: request %s/%s, client %v", what, s.State, s.Cause, res)
					}
				case kindDisconnect, kindEarlyGone:
					if s.State != lifecycle.Completed && (s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseClientDisconnect) {
						t.Errorf("%s: request %s/%s after the client left", what, s.State, s.Cause)
					}
				}
			}
			dp, pp := decode.settled(), prefill.settled()
			var b strings.Builder
			fmt.Fprintf(&b, "%s: %d requests in %s (%d clients), by end state, cause and stage:\n", backend, len(order), elapsed.Round(time.Millisecond), parallel)
			for _, k := range slices.Sorted(maps.Keys(counts)) {
				fmt.Fprintf(&b, "  %4d  %s\n", counts[k], k)
				total[strings.Fields(k)[0]] += counts[k]
			}
			fmt.Fprintf(&b, "  decode pool %d/%d free, %d quarantined; prefill %d/%d free",
				dp.FreePages, dp.TotalPages, dp.QuarantinedPages, pp.FreePages, pp.TotalPages)
			t.Log(b.String())
		})
	}
	t.Logf("both backends: %v", total)
}

// TestPDCorruptTransferFailsCleanly (I4) end to end: a KV transfer that a
// checksum catches (a corrupted tcp frame, a corrupted shm page) fails the
// request with a 500 and no content or usage, counted as an integrity
// failure and a checksum failure; nothing stays reserved and the next
// request gets its reference.
func TestPDCorruptTransferFailsCleanly(t *testing.T) {
	pt := newPromptText(t)
	ref := newRefWorker(t, workerPages)
	text, ids := pt.text(t, 40, 7)
	want := ref.run(ids, 8)
	for _, c := range []struct {
		backend config.TransferBackend
		rule    faults.Rule
	}{
		{config.TransferTCP, faults.Rule{Point: faults.SendFrame, Action: faults.Corrupt,
			Match: func(e *faults.Event) bool { return e.Frame != nil && e.Frame.Type == "DATA" && e.Page == 0 }}},
		{config.TransferSHM, faults.Rule{Point: faults.ShmPageDone, Action: faults.Corrupt,
			Match: func(e *faults.Event) bool { return e.Page == 0 }}},
	} {
		t.Run(string(c.backend), func(t *testing.T) {
			c.rule.Times = 2 // page 0 of a plain and of a streamed request
			inj := faults.New(c.rule)
			tg, decode, prefill := startPD(t, testConfig(), c.backend, workerPages, workerPages, worker.WithTransferFaults(inj))
			for _, stream := range []bool{false, true} {
				res := completion{tg: tg, key: tg.key, prompt: text, max: 8, stream: stream}.do(context.Background())
				// The failure comes before decode is ready: a plain HTTP error
				// even for a stream.
				if res.status != http.StatusInternalServerError || res.errCode != "internal_error" || res.text != "" || res.usage != nil {
					t.Errorf("request over a corrupted transfer (stream %v): %v", stream, res)
				}
				s := tg.finished(res.requestID)
				if s.State != lifecycle.Failed || s.Cause != causeDataLoss || s.PromptTokens != 0 || s.CompletionTokens != 0 {
					t.Errorf("request %+v", s)
				}
			}
			if inj.Fired(0) != 2 {
				t.Fatalf("the fault fired %d times", inj.Fired(0))
			}
			if v := decode.metric("warden_transfer_checksum_failures_total", nil); v != 2 {
				t.Errorf("decode counted %v checksum failures, want 2", v)
			}
			tg.waitMetric("warden_integrity_failures_total", map[string]string{"kind": causeDataLoss}, 2)
			if v := tg.metric("warden_tokens_total", map[string]string{"kind": "prompt", "tenant": "acme"}); v != 0 {
				t.Errorf("prompt tokens billed for failed transfers: %v", v)
			}
			decode.settled()
			prefill.settled()
			res := completion{tg: tg, key: tg.key, prompt: text, max: 8, stream: true}.do(context.Background())
			if diff := res.matchesRef(want); !res.complete(true) || diff != "" {
				t.Errorf("request after the fault: %v: %s", res, diff)
			}
			decode.settled()
		})
	}
}

// TestPDDrainRelayAfterLostDrainAck (I5, I6) end to end over shm:
// prefill's COMPLETE is lost, so the transfer hangs until the request is
// stopped — by an admin abort (the gateway's fan-out aborts both
// workers), or by prefill giving up on its own (decode then fails the
// transfer and reports it, and the gateway aborts prefill). Either way
// prefill's DRAIN_ACK reaches decode out of sequence and decode ends the
// session on it without accepting it, so it keeps the pages for an ack
// that cannot come (quarantined after its short drain timeout). The
// gateway's fan-out gets prefill's drain in its Abort answer and relays
// it to decode, which releases the pages (drained, late_drain if the
// timeout came first, or immediate if the relay came before decode's
// own Abort): afterwards both pools balance with nothing
// reserved and zero pages quarantined, and the next request gets its
// reference content.
func TestPDDrainRelayAfterLostDrainAck(t *testing.T) {
	pt := newPromptText(t)
	ref := newRefWorker(t, workerPages)
	text, ids := pt.text(t, 40, 9)
	want := ref.run(ids, 8)
	for _, c := range []struct {
		name string
		stop func(t *testing.T, tg *testGateway, prefill *pdWorker, s lifecycle.Snapshot)
	}{
		{"admin abort", func(t *testing.T, tg *testGateway, _ *pdWorker, s lifecycle.Snapshot) {
			if code, err := adminAbort(tg, s.ID); err != nil || code != http.StatusOK {
				t.Fatalf("admin abort: %d, %v", code, err)
			}
		}},
		{"prefill gives up, decode fails the transfer", func(t *testing.T, _ *testGateway, prefill *pdWorker, s lifecycle.Snapshot) {
			_, err := prefill.client.Abort(context.Background(), &controlpb.AbortRequest{
				Owner: &controlpb.Owner{Tenant: s.Tenant, RequestId: s.ID, Epoch: lifecycle.Epoch}, Cause: "test_prefill_abort"})
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inj := faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Drop,
				Match: func(e *faults.Event) bool { return e.Frame != nil && e.Frame.Type == "COMPLETE" }})
			tg, decode, prefill := startPDWith(t, testConfig(), config.TransferSHM, workerPages, workerPages,
				func(d *config.Config) { d.Worker.Transfer.DrainTimeout = 200 * time.Millisecond }, worker.WithTransferFaults(inj))
			done := make(chan apiResult, 1)
			go func() {
				done <- completion{tg: tg, key: tg.key, prompt: text, max: 8, stream: true}.do(context.Background())
			}()
			waitFor(t, "the request's COMPLETE to be lost", func() bool { return inj.Fired(0) == 1 })
			var s lifecycle.Snapshot
			for _, l := range tg.table.List() {
				if !l.State.Terminal() {
					s = l
				}
			}
			if s.ID == "" {
				t.Fatal("no request in flight")
			}
			c.stop(t, tg, prefill, s)
			if res := <-done; res.complete(true) || res.text != "" || res.usage != nil {
				t.Errorf("the stopped request: %v", res)
			}
			if s := tg.finished(s.ID); s.State != lifecycle.Aborted && s.State != lifecycle.Failed {
				t.Errorf("request %+v, want aborted or failed", s)
			} else {
				t.Logf("the request ended %s/%s at %s", s.State, s.Cause, s.Stage)
			}
			// The gateway aborts decode and prefill at once and relays
			// prefill's drain when its Abort answers, so the relay may reach
			// decode before decode's own Abort: then it marks the transfer
			// drained and the Abort releases at once (immediate). After it,
			// the relay acks the parked release (drained, or late_drain
			// once the drain timeout quarantined the pages). Any of the
			// three is the relayed drain releasing the pages.
			released := func() float64 {
				var n float64
				for _, o := range []string{"immediate", "drained", "late_drain"} {
					n += decode.metric("warden_decode_deferred_kv_release_total", map[string]string{"outcome": o})
				}
				return n
			}
			waitFor(t, "decode to release the pages on the relayed drain", func() bool { return released() == 1 })
			// Decode counts the relay once the release it caused has
			// returned, so the count may trail the release by a moment.
			// Any other result is counted instead and the wait times out.
			waitFor(t, "decode to count one applied relayed drain", func() bool {
				return decode.metric("warden_decode_writer_drain_relays_total", map[string]string{"result": "applied"}) == 1
			})
			waitFor(t, "the relay to show in the request's snapshot", func() bool {
				s, _ := tg.table.Get(s.ID)
				return slices.ContainsFunc(s.Workers, func(w lifecycle.Worker) bool { return w.ID == decode.id && w.DrainRelayed })
			})
			for _, w := range []*pdWorker{decode, prefill} {
				if p := w.settled(); p.QuarantinedPages != 0 || p.FreePages != p.TotalPages {
					t.Errorf("worker %s after the relay: %v, want every page free, none quarantined", w.id, p)
				}
			}
			next := completion{tg: tg, key: tg.key, prompt: text, max: 8, stream: true}.do(context.Background())
			if diff := next.matchesRef(want); !next.complete(true) || diff != "" {
				t.Errorf("request after the fault: %v: %s", next, diff)
			}
			decode.settled()
			prefill.settled()
		})
	}
}

// TestRegistryRefusesUnauthenticatedWorkers (I10, gateway side): only the
// worker identity may register. A peer without a client certificate, with
// the gateway's own certificate, or in plaintext cannot announce a worker
// (which would be sent tenants' prompts); it never appears among the
// workers and the model stays unserved.
func TestRegistryRefusesUnauthenticatedWorkers(t *testing.T) {
	tg := startGateway(t, testConfig())
	addr := tg.RegistryAddr().String()
	info := &controlpb.WorkerInfo{WorkerId: "rogue", Role: controlpb.Role_ROLE_BOTH, Model: "tiny",
		ControlAddr: "127.0.0.1:9", TransferAddr: "127.0.0.1:9", TransferBackend: "tcp", HostId: "h", TokenizerSha256: "00"}
	pool := &controlpb.PoolStats{TotalPages: 1 << 20, FreePages: 1 << 20, PageTokens: 16, CapacityTokens: 16 << 20}
	register := func(creds grpc.DialOption) error {
		conn, err := grpc.NewClient(addr, creds)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = controlpb.NewRegistryClient(conn).Register(ctx, &controlpb.RegisterRequest{Worker: info, Pool: pool})
		return err
	}
	// The control: with the worker identity the call gets through to the
	// registry, which then fails to fetch the rogue's model assets.
	if err := register(clusterCreds(t, pki.WorkerCert, pki.WorkerKey)); err == nil || !strings.Contains(err.Error(), "model assets") {
		t.Fatalf("registration with the worker identity: %v, want it to reach the asset check", err)
	}
	for name, creds := range map[string]grpc.DialOption{
		"no client certificate":   clusterCreds(t, "", ""),
		"the gateway certificate": clusterCreds(t, pki.GatewayCert, pki.GatewayKey),
		"a plaintext connection":  grpc.WithTransportCredentials(insecure.NewCredentials()),
	} {
		if err := register(creds); err == nil || strings.Contains(err.Error(), "model assets") {
			t.Errorf("registration over %s reached the registry: %v", name, err)
		}
	}
	if _, ok := tg.reg.Get("rogue"); ok || len(tg.reg.Workers()) != 0 || tg.Ready() == nil {
		t.Fatalf("a rogue worker was registered: %+v", tg.reg.Workers())
	}
}

// clusterCreds are client credentials with the cluster CA and, unless
// empty, certFile's identity, expecting the gateway's registry.
func clusterCreds(t *testing.T, certFile, keyFile string) grpc.DialOption {
	t.Helper()
	tc, err := tlsutil.ClusterClientConfig(pki.CACert, certFile, keyFile, tlsutil.PeerGateway)
	if err != nil {
		t.Fatal(err)
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(tc))
}
