package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker"
)

// Fixtures of the P/D isolation and admission tests: exact-length prompts,
// a reference worker, workers whose metrics the test reads, and a raw
// OpenAI client that reports exactly what it received.

// promptText builds completion prompts of an exact token count: the
// gateway prefills BOS and then the text's tokens, and the text is made
// of characters the tokenizer never merges, so n characters are n tokens.
type promptText struct {
	tok   *tokenizer.Tokenizer
	bos   int32
	atoms []byte // single-token characters no pair of which merges
}

func newPromptText(t testing.TB) *promptText {
	t.Helper()
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	bos, ok := tok.BOS()
	if !ok {
		t.Fatal("the tiny tokenizer has no BOS")
	}
	pt := &promptText{tok: tok, bos: bos}
	count := func(s string) int {
		ids, err := tok.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		return len(ids)
	}
	for c := byte('!'); c <= '~'; c++ {
		if count(string(c)) != 1 || count(string([]byte{c, c})) != 2 {
			continue
		}
		ok := true
		for _, a := range pt.atoms {
			if count(string([]byte{a, c})) != 2 || count(string([]byte{c, a})) != 2 {
				ok = false
				break
			}
		}
		if ok {
			pt.atoms = append(pt.atoms, c)
		}
	}
	if len(pt.atoms) < 8 {
		t.Fatalf("only %d non-merging characters in the tiny vocabulary: %q", len(pt.atoms), pt.atoms)
	}
	return pt
}

// run returns n pseudo-random atoms drawn with seed.
func (pt *promptText) run(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := range b {
		b[i] = pt.atoms[rng.IntN(len(pt.atoms))]
	}
	return string(b)
}

// text returns a prompt of exactly n tokens (BOS included) and its token
// IDs as the gateway prefills them.
func (pt *promptText) text(t testing.TB, n int, seed uint64) (string, []int32) {
	t.Helper()
	return pt.check(t, pt.run(n-1, seed), n)
}

// marked returns a prompt of exactly n tokens that starts and ends with
// markers unique to id (distinct runs of 8 tokens), with filler between.
func (pt *promptText) marked(t testing.TB, n int, id uint64) (string, []int32) {
	t.Helper()
	const m = 8
	if n < 2*m+1 {
		t.Fatalf("a marked prompt needs at least %d tokens", 2*m+1)
	}
	s := pt.run(m, 2*id+1) + pt.run(n-1-2*m, 1<<40+id) + pt.run(m, 2*id+2)
	return pt.check(t, s, n)
}

func (pt *promptText) check(t testing.TB, s string, n int) (string, []int32) {
	t.Helper()
	ids, err := pt.tok.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	ids = append([]int32{pt.bos}, ids...)
	if len(ids) != n {
		t.Fatalf("prompt of %d characters is %d tokens, want %d", len(s), len(ids), n)
	}
	return s, ids
}

// refWorker is a stand-alone both worker, called directly: what a single
// node computes for a prompt with greedy decoding.
type refWorker struct {
	t      testing.TB
	tok    *tokenizer.Tokenizer
	client controlpb.WorkerClient
	n      int
}

// newRefWorker starts a both worker with a pool of pages pages that
// registers with a registry that only records its address.
func newRefWorker(t *testing.T, pages int) *refWorker {
	t.Helper()
	srvTLS, err := tlsutil.ClusterServerConfig(pki.CACert, pki.GatewayCert, pki.GatewayKey, tlsutil.PeerWorker)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)))
	controlpb.RegisterRegistryServer(srv, &recordingRegistry{addr: addrs})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cfg := workerConfig(t, fmt.Sprintf("ref-%d", realN.Add(1)), config.RoleBoth, config.TransferTCP, ln.Addr().String())
	cfg.Worker.KV.MemoryBytes = config.ByteSize(pages * tinyPageBytes)
	startReal(t, cfg)
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	return &refWorker{t: t, tok: tok, client: dialWorker(t, <-addrs)}
}

// run generates greedily for prompt and decodes the text as the gateway
// does (special tokens render as nothing).
func (r *refWorker) run(prompt []int32, maxTokens int) reference {
	r.t.Helper()
	return r.runSampling(prompt, &controlpb.SamplingParams{Temperature: 0, TopP: 1, MaxTokens: int32(maxTokens)})
}

// runSampling generates for prompt with sampling sp.
func (r *refWorker) runSampling(prompt []int32, sp *controlpb.SamplingParams) reference {
	r.t.Helper()
	r.n++
	stream, err := r.client.Generate(context.Background(), &controlpb.GenerateRequest{
		Owner:  &controlpb.Owner{Tenant: "ref", RequestId: fmt.Sprint("ref-", r.n), Epoch: 1},
		Prompt: prompt, Sampling: sp,
	})
	if err != nil {
		r.t.Fatal(err)
	}
	dec := tokenizer.NewStreamDecoder(r.tok)
	var b strings.Builder
	var ids []int32
	for {
		ev, err := stream.Recv()
		if err != nil {
			r.t.Fatalf("reference of a %d-token prompt: %v", len(prompt), err)
		}
		for _, id := range ev.GetTokens().GetIds() {
			ids = append(ids, id)
			if r.tok.IsSpecial(id) {
				continue
			}
			s, err := dec.Add(id)
			if err != nil {
				r.t.Fatal(err)
			}
			b.WriteString(s)
		}
		if d := ev.GetDone(); d != nil {
			return reference{text: b.String() + dec.Flush(), finish: d.FinishReason, prompt: d.PromptTokens, completion: d.CompletionTokens, ids: ids}
		}
	}
}

// pdWorker is a real worker whose metrics registry the test reads.
type pdWorker struct {
	*realWorker
	prom *prometheus.Registry
}

// startPDWorker runs a worker for cfg until the test ends and waits until
// the gateway lists it as healthy with its pool.
func startPDWorker(t *testing.T, tg *testGateway, cfg *config.Config, opts ...worker.Option) *pdWorker {
	t.Helper()
	prom := prometheus.NewRegistry()
	w, err := worker.New(cfg, append([]worker.Option{worker.WithLogger(testLogger(t)), worker.WithRegistry(prom)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &realWorker{t: t, id: cfg.Worker.ID, cfg: cfg, stop: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(rw.kill)
	// Registered with this pool: a worker that came back under the same ID
	// replaces its old registration.
	capacity := int64(cfg.Worker.KV.MemoryBytes) / tinyPageBytes * pdPageTokens
	var addr string
	waitFor(t, "worker "+rw.id+" to register", func() bool {
		w, ok := tg.reg.Get(rw.id)
		if !ok {
			return false
		}
		s := w.Snapshot()
		addr = s.ControlAddr
		return s.Healthy && s.Pool.CapacityTokens == capacity
	})
	rw.client = dialWorker(t, addr)
	return &pdWorker{realWorker: rw, prom: prom}
}

// metric reads a counter or gauge of the worker.
func (w *pdWorker) metric(name string, labels map[string]string) float64 {
	w.t.Helper()
	return gathered(w.t, w.prom, name, labels)
}

// gathered returns the value of the sample of name with labels in g.
func gathered(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// transferCounters are the worker metrics that move when a request reaches
// a worker or a KV transfer starts: request RPCs by method and code (all
// but Status and ModelAssets), transfer bytes and frames, prefilled tokens.
// It reads them once no such RPC is in flight: a client can have its whole
// answer before the worker's Generate handler has returned and been counted.
func (w *pdWorker) transferCounters() map[string]float64 {
	w.t.Helper()
	out := map[string]float64{}
	waitFor(w.t, "worker "+w.id+" serving no request RPC", func() bool {
		mfs, err := w.prom.Gather()
		if err != nil {
			w.t.Fatal(err)
		}
		clear(out)
		for _, mf := range mfs {
			name := mf.GetName()
			if name != "warden_worker_requests_total" && name != "warden_worker_requests_in_flight" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				rpc := labels["rpc"]
				switch {
				case rpc == "Status" || rpc == "ModelAssets":
				case name == "warden_worker_requests_in_flight":
					if m.GetGauge().GetValue() != 0 {
						return false
					}
				default:
					out[rpc+"/"+labels["code"]] = m.GetCounter().GetValue()
				}
			}
		}
		return true
	})
	for _, dir := range []string{"sent", "received"} {
		out["bytes/"+dir] = w.metric("warden_transfer_bytes_total", map[string]string{"direction": dir})
		out["frames/"+dir] = w.metric("warden_transfer_frames_total", map[string]string{"direction": dir})
	}
	out["prefill tokens"] = w.metric("warden_engine_tokens_total", map[string]string{"kind": "prefill"})
	return out
}

// status is the worker's Status.
func (w *pdWorker) status() *controlpb.WorkerStatus {
	w.t.Helper()
	st, err := w.client.Status(context.Background(), &controlpb.StatusRequest{})
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// settled waits until nothing is reserved or in use on the worker and no
// request is in its table, and checks that its pool balances. Quarantined
// pages are allowed only when a drain timeout was counted.
func (w *pdWorker) settled() *controlpb.PoolStats {
	w.t.Helper()
	var st *controlpb.WorkerStatus
	deadline := time.Now().Add(30 * time.Second)
	for {
		st = w.status()
		if p := st.GetPool(); p.ReservedPages+p.InUsePages == 0 && len(st.Requests) == 0 {
			break
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("worker %s did not settle: pool %v, requests %v", w.id, st.GetPool(), st.Requests)
		}
		time.Sleep(5 * time.Millisecond)
	}
	p := st.GetPool()
	if p.FreePages+p.ReservedPages+p.InUsePages+p.QuarantinedPages != p.TotalPages {
		w.t.Errorf("worker %s: pool does not balance: %v", w.id, p)
	}
	if p.QuarantinedPages > 0 && w.metric("warden_decode_deferred_kv_release_total", map[string]string{"outcome": "timeout"}) == 0 {
		w.t.Errorf("worker %s: %d pages quarantined without a counted drain timeout", w.id, p.QuarantinedPages)
	}
	return p
}

// apiResult is what a client received for one request.
type apiResult struct {
	status    int
	requestID string // x-request-id
	text      string
	finish    string
	usage     *struct{ PromptTokens, CompletionTokens int64 }
	sawDone   bool // stream: data: [DONE]
	errCode   string
	errType   string
	errParam  string
	errMsg    string
	transport error // the client gave up or the connection broke
}

// complete reports whether the response looks like a finished completion.
func (r apiResult) complete(stream bool) bool {
	return r.transport == nil && r.status == http.StatusOK && r.errCode == "" && r.finish != "" && r.usage != nil && (!stream || r.sawDone)
}

func (r apiResult) String() string {
	return fmt.Sprintf("status %d id %s text %q finish %q usage %v done %v err %s/%s/%s %q transport %v",
		r.status, r.requestID, r.text, r.finish, r.usage, r.sawDone, r.errType, r.errCode, r.errParam, r.errMsg, r.transport)
}

// completion is a raw client for /v1/completions. onChunk, when set, is
// called after each streamed data event with their count; it may cancel
// the request.
type completion struct {
	tg       *testGateway
	key      string
	clientID string
	prompt   string
	max      int
	stream   bool
	onChunk  func(n int)
}

func (c completion) do(ctx context.Context) (res apiResult) {
	body := map[string]any{"model": "tiny", "prompt": c.prompt, "max_tokens": c.max, "temperature": 0}
	if c.stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	header := http.Header{}
	if c.clientID != "" {
		header.Set("X-Client-Request-Id", c.clientID)
	}
	resp, err := c.tg.apiAs(c.key).send(ctx, http.MethodPost, "/v1/completions", body, header)
	if err != nil {
		res.transport = err
		return res
	}
	defer resp.Body.Close()
	res.status, res.requestID = resp.StatusCode, resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusOK || !c.stream {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			res.transport = err
			return res
		}
		res.parse(raw)
		return res
	}
	events := newSSEReader(resp.Body)
	n := 0
	for {
		data, ok := events.next()
		if !ok {
			break
		}
		if res.sawDone {
			res.errMsg = "data after [DONE]"
			return res
		}
		if string(data) == "[DONE]" {
			res.sawDone = true
			continue
		}
		res.parse(data)
		n++
		if c.onChunk != nil {
			c.onChunk(n)
		}
	}
	res.transport = events.err()
	return res
}

// parse folds one JSON body or stream event into res.
func (res *apiResult) parse(raw []byte) {
	var v struct {
		Choices []struct {
			Text         string  `json:"text"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
		envelope
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		res.errCode, res.errMsg = "unparsable", string(raw)
		return
	}
	for _, c := range v.Choices {
		res.text += c.Text
		if c.FinishReason != nil && *c.FinishReason != "" {
			res.finish = *c.FinishReason
		}
	}
	if v.Usage != nil {
		res.usage = &struct{ PromptTokens, CompletionTokens int64 }{v.Usage.PromptTokens, v.Usage.CompletionTokens}
	}
	if e := v.Error; e.Message != "" || e.Type != "" || e.Param != nil || e.Code != nil {
		res.errMsg, res.errType, res.errParam, res.errCode = e.Message, e.Type, str(e.Param), str(e.Code)
		if res.errCode == "" {
			res.errCode = e.Type
		}
	}
}

// matchesRef reports how res differs from ref ("" when it equals it).
func (r apiResult) matchesRef(ref reference) string {
	switch {
	case r.text != ref.text:
		return fmt.Sprintf("text %q, reference %q", r.text, ref.text)
	case r.finish != ref.finish:
		return fmt.Sprintf("finish %q, reference %q", r.finish, ref.finish)
	case r.usage == nil:
		return "no usage"
	case r.usage.PromptTokens != ref.prompt || r.usage.CompletionTokens != ref.completion:
		return fmt.Sprintf("usage %d+%d, reference %d+%d", r.usage.PromptTokens, r.usage.CompletionTokens, ref.prompt, ref.completion)
	}
	return ""
}

// newTenantKey creates a tenant and returns its API key.
func newTenantKey(t testing.TB, tg *testGateway, id string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: id}); err != nil {
		t.Fatal(err)
	}
	key, _, err := tg.Store().IssueKey(ctx, id, "test")
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// adminAbort aborts a request through the admin API; it may run on any
// goroutine.
func adminAbort(tg *testGateway, id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+tg.AdminAddr().String()+"/admin/v1/requests/"+id+"/abort", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := tg.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
