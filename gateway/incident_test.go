package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
)

// The 2026 incident (DESIGN.md §1) in miniature: an advertised context
// window twice the KV pool of every worker, P/D over tcp and shm: 8192
// tokens against pools of exactly 4096 (worker.kv.memory_bytes for 256
// pages of 16 tokens); a quarter of both under the race detector, where
// prefilling 4096 tokens takes half a minute.
type incidentSize struct{ context, pages int }

func incidentGeometry() incidentSize {
	if raceEnabled {
		return incidentSize{context: 2048, pages: 64}
	}
	return incidentSize{context: 8192, pages: 256}
}

// limit is the effective context: every pool's capacity.
func (s incidentSize) limit() int { return s.pages * pdPageTokens }

// incidentMax is max_tokens of every probe.
const incidentMax = 16

// incidentConfig is a gateway whose model advertises the incident's
// context under policy.
func incidentConfig(policy config.ContextPolicy) *config.Config {
	cfg := testConfig()
	cfg.Models = []config.Model{{Name: "tiny", ContextLength: incidentGeometry().context, ContextPolicy: policy}}
	return cfg
}

// rejectedBeforeAnyWorker checks what a rejected request must leave
// behind (I1, I7): no usage in its response, no prompt tokens in its
// lifecycle, nothing reserved on any worker, no call beyond Status on any
// worker and no transfer started (the workers' counters of RPCs,
// transfer bytes and frames and prefilled tokens unchanged).
func rejectedBeforeAnyWorker(t *testing.T, what string, tg *testGateway, res apiResult, before map[string]map[string]float64, ws ...*pdWorker) {
	t.Helper()
	if res.usage != nil {
		t.Errorf("%s: a rejection reports usage %+v", what, *res.usage)
	}
	if s := tg.finished(res.requestID); s.State != lifecycle.Rejected || s.PromptTokens != 0 || len(s.Workers) != 0 {
		t.Errorf("%s: request %s/%s, %d prompt tokens, workers %v", what, s.State, s.Cause, s.PromptTokens, s.Workers)
	}
	for _, w := range ws {
		if after := w.transferCounters(); !maps.Equal(after, before[w.id]) {
			t.Errorf("%s: worker %s was reached: counters %v, before %v", what, w.id, after, before[w.id])
		}
		st := w.status()
		if p := st.GetPool(); p.ReservedPages+p.InUsePages+p.QuarantinedPages != 0 || len(st.Requests) != 0 {
			t.Errorf("%s: worker %s holds something: %v, requests %v", what, w.id, p, st.Requests)
		}
	}
}

// counters snapshots every worker's transferCounters.
func counters(ws ...*pdWorker) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, w := range ws {
		out[w.id] = w.transferCounters()
	}
	return out
}

// TestIncidentShapeRejectedBeforeAnyWorker (I1, I2, I4, I7): configured
// context 8192, every KV pool 4096 tokens (incidentGeometry), P/D over tcp
// and shm. Under
// clamp, a request at the effective limit gets exactly the single-worker
// reference and honest usage; one token more, twice the limit and far
// beyond the configured window are 400 context_length_exceeded naming the
// limit and the counts. Under refuse every request is a 503 naming the
// disagreement. No rejected request reserves a page, reaches a worker or
// starts a transfer.
func TestIncidentShapeRejectedBeforeAnyWorker(t *testing.T) {
	t.Parallel() // waits on timers, failovers and heartbeats: it overlaps with the others
	pt := newPromptText(t)
	size := incidentGeometry()
	limit := size.limit()
	ref := newRefWorker(t, size.pages)
	type probe struct {
		name   string
		prompt int
		param  string // the 400's param under clamp; "" when it fits
	}
	probes := []probe{
		{"at the limit", limit - incidentMax, ""},
		{"limit + 1", limit - incidentMax + 1, "max_tokens"},
		{"twice the limit", 2 * limit, "prompt"},
		{"beyond the configured window", 20000, "prompt"},
	}
	texts := make([]string, len(probes))
	var fits reference
	for i, p := range probes {
		var ids []int32
		texts[i], ids = pt.text(t, p.prompt, uint64(1000+i))
		if p.param == "" {
			fits = ref.run(ids, incidentMax)
		}
	}
	for _, policy := range []config.ContextPolicy{config.ContextClamp, config.ContextRefuse} {
		for _, backend := range backends {
			t.Run(fmt.Sprintf("%s/%s", policy, backend), func(t *testing.T) {
				tg, decode, prefill := startPDServed(t, incidentConfig(policy), backend, policy)
				for i, p := range probes {
					what := fmt.Sprintf("%s (%d+%d tokens)", p.name, p.prompt, incidentMax)
					before := counters(decode, prefill)
					res := completion{tg: tg, key: tg.key, prompt: texts[i], max: incidentMax}.do(context.Background())
					switch {
					case policy == config.ContextRefuse:
						// The public message says why without the pool's size
						// or the worker (those are in the logs and admin API).
						if res.status != http.StatusServiceUnavailable || res.errCode != "model_unavailable" ||
							!strings.Contains(res.errMsg, "context_policy refuse") || strings.Contains(res.errMsg, fmt.Sprint(limit)) ||
							strings.Contains(res.errMsg, decode.id) {
							t.Errorf("%s under refuse: %v", what, res)
						}
						rejectedBeforeAnyWorker(t, what, tg, res, before, decode, prefill)
					case p.param == "":
						if !res.complete(false) || res.matchesRef(fits) != "" || res.usage.PromptTokens != int64(p.prompt) {
							t.Errorf("%s: %v; reference %+v", what, res, fits)
						}
						// It did go through P/D, with exactly its prompt.
						if d := prefill.transferCounters()["prefill tokens"] - before[prefill.id]["prefill tokens"]; d != float64(p.prompt) {
							t.Errorf("%s: prefill worker prefilled %v tokens", what, d)
						}
					default:
						msg := fmt.Sprintf("maximum context length is %d tokens, but %d tokens were requested (%d in the prompt, %d for the completion)",
							limit, p.prompt+incidentMax, p.prompt, incidentMax)
						if res.status != http.StatusBadRequest || res.errCode != "context_length_exceeded" || res.errParam != p.param ||
							!strings.Contains(res.errMsg, msg) {
							t.Errorf("%s: %v; want 400 context_length_exceeded on %s saying %q", what, res, p.param, msg)
						}
						rejectedBeforeAnyWorker(t, what, tg, res, before, decode, prefill)
					}
				}
				wantPrompt := 0.0
				if policy == config.ContextClamp {
					wantPrompt = float64(probes[0].prompt)
				}
				tg.waitMetric("warden_tokens_total", map[string]string{"kind": "prompt", "tenant": "acme"}, wantPrompt)
				decode.settled()
				prefill.settled()
			})
		}
	}
}

// startPDServed starts P/D workers with incident-sized pools and waits
// until the model's state reflects both (served and clamped, or refused).
func startPDServed(t *testing.T, cfg *config.Config, backend config.TransferBackend, policy config.ContextPolicy) (*testGateway, *pdWorker, *pdWorker) {
	t.Helper()
	tg := startGateway(t, cfg)
	reg := tg.RegistryAddr().String()
	n := realN.Add(1)
	var ws []*pdWorker
	for _, role := range []config.Role{config.RoleDecode, config.RolePrefill} {
		wc := workerConfig(t, fmt.Sprintf("%s-%s-%d", role, backend, n), role, backend, reg)
		wc.Worker.KV.MemoryBytes = config.ByteSize(incidentGeometry().pages * tinyPageBytes)
		ws = append(ws, startPDWorker(t, tg, wc))
	}
	var st admission.State
	waitFor(t, "both workers in the model's state", func() bool {
		st, _, _ = tg.admission.State(context.Background(), "tiny")
		return len(st.Workers) == 2
	})
	clamp := policy == config.ContextClamp
	if st.Serving != clamp || (clamp && st.Effective != int64(incidentGeometry().limit())) {
		t.Errorf("model state under %s: %+v", policy, st)
	}
	return tg, ws[0], ws[1]
}

// TestMarkedPromptsNeverGetForeignContent (§7 markers): prompts carrying
// unique markers at their start and end, lengthened step by step up to the
// effective limit and past it, over P/D: every answer is exactly its
// single-worker reference or an explicit context_length_exceeded error —
// never a 200 with other content.
func TestMarkedPromptsNeverGetForeignContent(t *testing.T) {
	const pages, maxTokens = 20, 8 // effective context 320 against 1024 configured
	limit := pages * pdPageTokens
	pt := newPromptText(t)
	ref := newRefWorker(t, 2*pages)
	lengths := []int{17, 100, 200, 250, 290, 300, 305, 309, limit - maxTokens - 1, limit - maxTokens,
		limit - maxTokens + 1, limit, limit + 5, 2 * limit, 1100}
	type probe struct {
		text string
		fits bool
		ref  reference
	}
	probes := make([]probe, len(lengths))
	for i, n := range lengths {
		text, ids := pt.marked(t, n, uint64(i))
		probes[i] = probe{text: text, fits: n+maxTokens <= limit}
		if probes[i].fits {
			probes[i].ref = ref.run(ids, maxTokens)
		}
	}
	for _, backend := range backends {
		t.Run(string(backend), func(t *testing.T) {
			cfg := testConfig()
			cfg.Models[0].ContextLength = 1024
			// Prefill gets room for two prompts: it may still hold the
			// previous request's pages (until decode's verdict reaches it)
			// when the next request arrives, and the gateway does not wait
			// for a busy prefill pool.
			tg, decode, prefill := startPD(t, cfg, backend, pages, 2*pages)
			for i, p := range probes {
				stream := i%2 == 1
				res := completion{tg: tg, key: tg.key, prompt: p.text, max: maxTokens, stream: stream}.do(context.Background())
				what := fmt.Sprintf("marked prompt of %d tokens (stream %v)", lengths[i], stream)
				switch {
				case res.status == http.StatusOK && !p.fits:
					t.Errorf("%s: 200 past the limit: %v", what, res)
				case res.status == http.StatusOK:
					if diff := res.matchesRef(p.ref); !res.complete(stream) || diff != "" {
						t.Errorf("%s: %s; %v", what, diff, res)
					}
				case p.fits:
					t.Errorf("%s: refused though it fits: %v", what, res)
				case res.status != http.StatusBadRequest || res.errCode != "context_length_exceeded" || res.text != "" || res.usage != nil:
					t.Errorf("%s: %v; want an explicit 400 context_length_exceeded and nothing else", what, res)
				}
			}
			wentThroughPD(t, tg, decode, prefill)
			decode.settled()
			prefill.settled()
		})
	}
}

// WardenCheck runs the CLI (cmd/warden/cli.Main) for `warden check`; the
// external test package sets it (cmd/warden/cli imports this package, so
// these tests cannot import it).
var WardenCheck func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// TestSmallerPoolReregistrationShrinksContext (I2): a decode worker that
// comes back under the same ID with a smaller pool changes the effective
// context at once: a request that fit before is a 400, /v1/models shows
// the new context_length, and `warden check` exits 1 naming the model; a
// request within the new window still gets its reference.
func TestSmallerPoolReregistrationShrinksContext(t *testing.T) {
	const small = 32 // pages: 512 tokens
	pt := newPromptText(t)
	ref := newRefWorker(t, workerPages)
	bigText, bigIDs := pt.text(t, 1000, 1)
	smallText, smallIDs := pt.text(t, 300, 2)
	bigRef, smallRef := ref.run(bigIDs, incidentMax), ref.run(smallIDs, incidentMax)

	tg, decode, prefill := startPD(t, testConfig(), config.TransferTCP, workerPages, workerPages)
	check := func() (int, string) {
		t.Helper()
		if WardenCheck == nil {
			t.Fatal("WardenCheck is not set: cli_test.go (package gateway_test) sets it")
		}
		var out, errOut bytes.Buffer
		code := WardenCheck(context.Background(), []string{"check", "--url", "https://" + tg.AdminAddr().String(),
			"--token", adminToken, "--cacert", pki.CACert}, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	models := func() (effective, configured int64) {
		code, body := tg.get("/v1/models")
		var list struct {
			Data []struct {
				ID         string `json:"id"`
				Context    int64  `json:"context_length"`
				Configured int64  `json:"configured_context_length"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || len(list.Data) != 1 || list.Data[0].ID != "tiny" {
			t.Fatalf("/v1/models: %d %s", code, body)
		}
		return list.Data[0].Context, list.Data[0].Configured
	}
	if eff, conf := models(); eff != 2048 || conf != 2048 {
		t.Fatalf("/v1/models before: context %d, configured %d", eff, conf)
	}
	if code, out := check(); code != 0 {
		t.Fatalf("warden check with agreeing pools: exit %d\n%s", code, out)
	}
	res := completion{tg: tg, key: tg.key, prompt: bigText, max: incidentMax}.do(context.Background())
	if diff := res.matchesRef(bigRef); !res.complete(false) || diff != "" {
		t.Fatalf("1000-token prompt with a 2048-token pool: %s; %v", diff, res)
	}
	decode.settled()

	// The decode worker restarts with a quarter of the pool.
	decode.kill()
	cfg := workerConfig(t, decode.id, config.RoleDecode, config.TransferTCP, tg.RegistryAddr().String())
	cfg.Worker.KV.MemoryBytes = config.ByteSize(small * tinyPageBytes)
	decode = startPDWorker(t, tg, cfg)

	before := counters(decode, prefill)
	res = completion{tg: tg, key: tg.key, prompt: bigText, max: incidentMax}.do(context.Background())
	msg := fmt.Sprintf("maximum context length is %d tokens", small*pdPageTokens)
	if res.status != http.StatusBadRequest || res.errCode != "context_length_exceeded" || res.errParam != "prompt" || !strings.Contains(res.errMsg, msg) {
		t.Errorf("the same request after the pool shrank: %v; want 400 saying %q", res, msg)
	}
	rejectedBeforeAnyWorker(t, "after the pool shrank", tg, res, before, decode, prefill)
	if eff, conf := models(); eff != small*pdPageTokens || conf != 2048 {
		t.Errorf("/v1/models after: context %d, configured %d; want %d, 2048", eff, conf, small*pdPageTokens)
	}
	code, out := check()
	if code != 1 || !strings.Contains(out, `model "tiny"`) || !strings.Contains(out, decode.id) {
		t.Errorf("warden check after the pool shrank: exit %d, want 1 naming model tiny and worker %s\n%s", code, decode.id, out)
	}
	res = completion{tg: tg, key: tg.key, prompt: smallText, max: incidentMax, stream: true}.do(context.Background())
	if diff := res.matchesRef(smallRef); !res.complete(true) || diff != "" {
		t.Errorf("300-token prompt within the new window: %s; %v", diff, res)
	}
	wentThroughPD(t, tg, decode, prefill)
	decode.settled()
	prefill.settled()
}
