package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker/model"
)

// Shared by every test of the package: a dev PKI, the preset tokenizer
// files fake workers serve, and the tiny model real workers load.
var (
	pki      tlsutil.PKI
	tokFiles struct{ tokenizerJSON, configJSON []byte }
	modelDir string
	shmDir   string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "warden-gateway-test-")
	if err != nil {
		panic(err)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if pki, err = tlsutil.EnsureDevPKI(filepath.Join(dir, "pki"), nil); err != nil {
			fmt.Fprintln(os.Stderr, "dev PKI:", err)
			return 1
		}
		modelDir = filepath.Join(dir, "model")
		if err := model.Init(modelDir, model.PresetTiny, 1, model.F32); err != nil {
			fmt.Fprintln(os.Stderr, "model init:", err)
			return 1
		}
		if tokFiles.tokenizerJSON, err = os.ReadFile(filepath.Join(modelDir, tokenizer.TokenizerFile)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if tokFiles.configJSON, err = os.ReadFile(filepath.Join(modelDir, tokenizer.TokenizerConfigFile)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		shmDir = filepath.Join(dir, "shm")
		if err := os.Mkdir(shmDir, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// testLogger logs warnings and errors through t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// waitFor polls cond until it holds; it fails the test after a generous
// bound, which only a hang reaches.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const adminToken = "test-admin-token-0123456789abcdef"

// testConfig is a gateway on loopback ports chosen by the kernel, HTTPS
// and mTLS with the dev PKI, serving model tiny.
func testConfig() *config.Config {
	cfg := config.Default()
	g := &cfg.Gateway
	g.Listen, g.AdminListen, g.RegistryListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	g.TLS.CertFile, g.TLS.KeyFile = pki.ServerCert, pki.ServerKey
	g.AdminToken = adminToken
	g.HeartbeatTimeout = 3 * time.Second
	g.RequestTimeout = time.Minute
	g.DrainTimeout = 0 // stopping aborts at once; the drain tests set one
	g.ShutdownDelay = 0
	g.Queue = config.Queue{MaxWaiting: 16, MaxWait: 20 * time.Second}
	cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: pki.CACert, CertFile: pki.GatewayCert, KeyFile: pki.GatewayKey}
	cfg.Models = []config.Model{{Name: "tiny", ContextLength: 2048, ContextPolicy: config.ContextClamp}}
	cfg.Observability.LogLevel = "warn"
	return cfg
}

// testGateway is a running gateway with a tenant "acme" and its key.
type testGateway struct {
	*Gateway
	t      testing.TB
	http   *http.Client
	base   string
	key    string
	prom   *prometheus.Registry
	stop   context.CancelFunc
	result chan error
}

func startGateway(t testing.TB, cfg *config.Config) *testGateway {
	t.Helper()
	return startGatewayWith(t, cfg)
}

func startGatewayWith(t testing.TB, cfg *config.Config, opts ...Option) *testGateway {
	t.Helper()
	prom := prometheus.NewRegistry()
	g, err := New(cfg, append([]Option{WithLogger(testLogger(t)), WithRegistry(prom)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tg := &testGateway{Gateway: g, t: t, prom: prom, stop: cancel, result: make(chan error, 1),
		http: httpsClient(t), base: "https://" + g.APIAddr().String()}
	go func() { tg.result <- g.Run(ctx) }()
	t.Cleanup(func() { tg.shutdown() })
	// Gateways sharing a store share acme; each has a key of its own.
	if _, err := g.Store().CreateTenant(ctx, tenant.Tenant{ID: "acme"}); err != nil && !errors.Is(err, tenant.ErrExists) {
		t.Fatal(err)
	}
	if tg.key, _, err = g.Store().IssueKey(ctx, "acme", "test"); err != nil {
		t.Fatal(err)
	}
	return tg
}

// shutdown stops the gateway (once) and checks Run's result.
func (tg *testGateway) shutdown() {
	tg.stop()
	if err, ok := <-tg.result; ok {
		close(tg.result)
		if err != nil {
			tg.t.Errorf("gateway Run: %v", err)
		}
	}
}

func httpsClient(t testing.TB) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(pki.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// post sends a JSON body to the API and returns status, headers and body.
func (tg *testGateway) post(path string, body any) (int, http.Header, []byte) {
	tg.t.Helper()
	return tg.exchange(http.MethodPost, path, body)
}

// get sends an authenticated GET to the API.
func (tg *testGateway) get(path string) (int, []byte) {
	tg.t.Helper()
	code, _, out := tg.exchange(http.MethodGet, path, nil)
	return code, out
}

// exchange sends a request with the gateway's key and returns the answer;
// it fails the test if none came.
func (tg *testGateway) exchange(method, path string, body any) (int, http.Header, []byte) {
	tg.t.Helper()
	resp, err := tg.api().send(context.Background(), method, path, body, nil)
	if err != nil {
		tg.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

// admin sends a request to the admin API.
func (tg *testGateway) admin(method, path string) (int, []byte) {
	tg.t.Helper()
	req, _ := http.NewRequest(method, "https://"+tg.AdminAddr().String()+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := tg.http.Do(req)
	if err != nil {
		tg.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// envelope is the OpenAI error envelope.
type envelope struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeEnvelope(t testing.TB, body []byte) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an error envelope: %s", body)
	}
	return e
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// request returns the snapshot of the only request of the table whose
// state satisfies the test, waiting until it is terminal.
func (tg *testGateway) finished(id string) lifecycle.Snapshot {
	tg.t.Helper()
	var s lifecycle.Snapshot
	waitFor(tg.t, "request "+id+" to finish", func() bool {
		var ok bool
		s, ok = tg.table.Get(id)
		return ok && s.State.Terminal()
	})
	return s
}

// only returns the one request the gateway has seen.
func (tg *testGateway) only() lifecycle.Snapshot {
	tg.t.Helper()
	var l []lifecycle.Snapshot
	waitFor(tg.t, "exactly one request", func() bool {
		l = tg.table.List()
		return len(l) == 1
	})
	return l[0]
}

// metric returns the value of a counter or gauge with the given labels.
func (tg *testGateway) metric(name string, labels map[string]string) float64 {
	tg.t.Helper()
	mfs, err := tg.prom.Gather()
	if err != nil {
		tg.t.Fatal(err)
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
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}

// waitMetric waits until a counter or gauge reads want. A request's
// counts trail its terminal state in the table by a moment: driver.finish
// marks it terminal, releases its lease, and only then counts it.
func (tg *testGateway) waitMetric(name string, labels map[string]string, want float64) {
	tg.t.Helper()
	got := tg.metric(name, labels)
	for deadline := time.Now().Add(30 * time.Second); got != want && time.Now().Before(deadline); got = tg.metric(name, labels) {
		time.Sleep(5 * time.Millisecond)
	}
	if got != want {
		tg.t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// ---- fake workers ----

// call is one RPC a fake worker received.
type call struct {
	method  string
	request string // owner request ID
	cause   string // Abort's cause
}

// fakeWorker is an in-process worker speaking the control protocol over
// real mTLS: it registers and heartbeats like a worker, keeps page
// accounting, and "generates" a scripted reply: the reply's bytes as
// tokens, then EOS (counted, not sent, as a real worker does).
type fakeWorker struct {
	controlpb.UnimplementedWorkerServer
	t      testing.TB
	id     string
	role   controlpb.Role
	model  string
	host   string
	sha    string
	assets *controlpb.ModelAssetsResponse
	fabric *fabric
	gw     *testGateway

	// behaviour, set before requests arrive
	reply        string
	holdTokens   chan struct{} // if set, Generate waits for it after Ready
	tokensSent   chan struct{} // if set, closed after the first Tokens event
	failGenerate error         // returned by Generate after Ready (after one Tokens event)
	failPrefill  error         // returned by Prefill instead of pushing
	// limits are the constraint limits it advertises (nil: none);
	// enforce, when set, the ones Generate checks, refusing a constraint
	// over them as a real worker does.
	limits  *controlpb.ConstraintLimits
	enforce *constrain.Limits
	// releaseBeforeDone frees a request's pages before Generate sends
	// Done, as a real worker does, so the gateway's next request finds
	// them free as soon as this one ended.
	releaseBeforeDone bool
	// adapters, when set, makes the fake refuse a Reserve, Prefill or
	// Generate under a LoRA adapter it does not hold, as a worker does;
	// LoadAdapter then loads it (loads records each). adapterMem, when
	// set, is the adapter memory its heartbeats report.
	adapters   map[string]bool
	refuseLoad bool // LoadAdapter answers RESOURCE_EXHAUSTED: no room
	loads      []*loadedAdapter
	adapterMem *controlpb.AdapterMemory
	refusals   []string // "<method> <hash>" of each call refused for its adapter

	mu          sync.Mutex
	total       int64
	free        int64
	quarantined int64 // of total, neither free nor reserved
	calls       []call
	reserved    map[string]int64 // request → pages
	cancels     map[string]context.CancelFunc
	maxSeen     []int32 // sampling max_tokens of each Generate
	specSeen    []*bool // sampling speculative of each Generate

	srv      *grpc.Server
	addr     string // control address
	hbCancel context.CancelFunc
	hbDone   chan struct{}
	beats    atomic.Int64
	hbMu     sync.Mutex // held during a heartbeat
	hbPaused bool       // guarded by hbMu
}

const fakePageTokens = 16

// fabric links fake decode and prefill workers: a prefill marks its
// ticket's transfer complete.
type fabric struct {
	mu        sync.Mutex
	transfers map[string]chan struct{}
}

func (f *fabric) transfer(id string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.transfers == nil {
		f.transfers = make(map[string]chan struct{})
	}
	ch, ok := f.transfers[id]
	if !ok {
		ch = make(chan struct{})
		f.transfers[id] = ch
	}
	return ch
}

var fakeN atomic.Int64

// newFake makes a fake worker with capacity pages of 16 tokens; start
// registers it.
func newFake(tg *testGateway, role controlpb.Role, pages int64, fab *fabric) *fakeWorker {
	sum := sha256.Sum256(tokFiles.tokenizerJSON)
	sha := hex.EncodeToString(sum[:])
	w := &fakeWorker{
		t: tg.t, gw: tg, id: fmt.Sprintf("fake-%d", fakeN.Add(1)), role: role, model: "tiny", host: "host-1", sha: sha,
		fabric: fab, reply: "Hello, wörld 🌍!", total: pages, free: pages,
		reserved: make(map[string]int64), cancels: make(map[string]context.CancelFunc),
		assets: &controlpb.ModelAssetsResponse{Model: "tiny", TokenizerJson: tokFiles.tokenizerJSON,
			TokenizerConfigJson: tokFiles.configJSON, TokenizerSha256: sha, Shape: fakeShape},
	}
	return w
}

// start serves the fake and registers it; it returns once registered.
func (w *fakeWorker) start() *fakeWorker {
	w.t.Helper()
	if err := w.registerAt(w.serve()); err != nil {
		w.t.Fatalf("fake %s: register: %v", w.id, err)
	}
	return w
}

// serve starts the fake's control server and returns its address.
func (w *fakeWorker) serve() string {
	t := w.t
	t.Helper()
	w.assets.Model = w.model
	srvTLS, err := tlsutil.ClusterServerConfig(pki.CACert, pki.WorkerCert, pki.WorkerKey, tlsutil.PeerGateway)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)))
	controlpb.RegisterWorkerServer(w.srv, w)
	go func() { _ = w.srv.Serve(ln) }()
	t.Cleanup(w.kill)
	w.addr = ln.Addr().String()
	return w.addr
}

func (w *fakeWorker) registryClient() controlpb.RegistryClient {
	cliTLS, err := tlsutil.ClusterClientConfig(pki.CACert, pki.WorkerCert, pki.WorkerKey, tlsutil.PeerGateway)
	if err != nil {
		w.t.Fatal(err)
	}
	conn, err := grpc.NewClient(w.gw.RegistryAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cliTLS)))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { conn.Close() })
	return controlpb.NewRegistryClient(conn)
}

// What every fake worker reports about its weights and memory.
var (
	fakeDType  = "f16"
	fakeMemory = &controlpb.MemoryPlan{Source: "cgroup v2", LimitBytes: 1 << 30, AvailableBytes: 700 << 20,
		HeadroomBytes: 256 << 20, WeightsBytes: 100 << 20, BudgetBytes: 300 << 20}
)

func (w *fakeWorker) info(addr string) *controlpb.WorkerInfo {
	return &controlpb.WorkerInfo{WorkerId: w.id, Role: w.role, Model: w.model, ControlAddr: addr,
		TransferAddr: "127.0.0.1:9", TransferBackend: "tcp", HostId: w.host, TokenizerSha256: w.sha,
		ConstraintLimits: w.limits, WeightsDtype: fakeDType, Memory: fakeMemory}
}

// registerAt registers and starts heartbeating every 100 ms.
func (w *fakeWorker) registerAt(addr string) error {
	reg := w.registryClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := reg.Register(ctx, &controlpb.RegisterRequest{Worker: w.info(addr), Pool: w.pool()}); err != nil {
		return err
	}
	hctx, hcancel := context.WithCancel(context.Background())
	w.hbCancel, w.hbDone = hcancel, make(chan struct{})
	go func() {
		defer close(w.hbDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-tick.C:
			}
			w.hbMu.Lock()
			if !w.hbPaused {
				resp, err := reg.Heartbeat(hctx, &controlpb.HeartbeatRequest{WorkerId: w.id, Pool: w.pool(), Adapters: w.adapterMemory()})
				if err == nil && resp.Reregister {
					_, _ = reg.Register(hctx, &controlpb.RegisterRequest{Worker: w.info(addr), Pool: w.pool()})
				}
				w.beats.Add(1)
			}
			w.hbMu.Unlock()
		}
	}()
	return nil
}

// pauseHeartbeats stops heartbeats without stopping the loop; it returns
// once none is in flight. The gateway then routes on its own accounting
// (pages routed and given back), which makes capacity deterministic; set
// a heartbeat timeout long enough for the worker not to be declared lost.
func (w *fakeWorker) pauseHeartbeats() {
	w.hbMu.Lock()
	defer w.hbMu.Unlock()
	w.hbPaused = true
}

// stopHeartbeats silences the fake: the gateway will declare it lost.
func (w *fakeWorker) stopHeartbeats() {
	if w.hbCancel != nil {
		w.hbCancel()
		<-w.hbDone
		w.hbCancel = nil
	}
}

// kill stops heartbeats and the server.
func (w *fakeWorker) kill() {
	w.stopHeartbeats()
	if w.srv != nil {
		w.srv.Stop()
	}
}

func (w *fakeWorker) pool() *controlpb.PoolStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return &controlpb.PoolStats{TotalPages: w.total, FreePages: w.free, ReservedPages: w.total - w.free - w.quarantined,
		QuarantinedPages: w.quarantined, PageTokens: fakePageTokens, CapacityTokens: w.total * fakePageTokens}
}

func (w *fakeWorker) record(method string, owner *controlpb.Owner, cause string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, call{method: method, request: owner.GetRequestId(), cause: cause})
}

// requestCalls returns the RPCs about requests (all but ModelAssets and
// Status).
func (w *fakeWorker) requestCalls() []call {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []call
	for _, c := range w.calls {
		if c.method != "ModelAssets" && c.method != "Status" {
			out = append(out, c)
		}
	}
	return out
}

// aborts returns the causes of the Aborts received for request id.
func (w *fakeWorker) aborts(id string) []string {
	var out []string
	for _, c := range w.requestCalls() {
		if c.method == "Abort" && c.request == id {
			out = append(out, c.cause)
		}
	}
	return out
}

func (w *fakeWorker) freePages() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.free
}

// quarantine moves n free pages to quarantine, as a decode worker does
// when a dead writer's pages time out (I5).
func (w *fakeWorker) quarantine(n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.free -= n
	w.quarantined += n
}

// setFree changes the free pages (as other traffic would).
func (w *fakeWorker) setFree(n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.free = n
}

func (w *fakeWorker) reserve(owner *controlpb.Owner, tokens int64) error {
	pages := (tokens + fakePageTokens - 1) / fakePageTokens
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case pages > w.total:
		return status.Errorf(codes.OutOfRange, "can never fit: %d tokens", tokens)
	case w.reserved[owner.RequestId] > 0:
		return status.Error(codes.AlreadyExists, "already holds pages")
	case pages > w.free:
		return status.Errorf(codes.ResourceExhausted, "KV pool full")
	}
	w.free -= pages
	w.reserved[owner.RequestId] = pages
	return nil
}

func (w *fakeWorker) release(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.free += w.reserved[id]
	delete(w.reserved, id)
}

// ModelAssets implements controlpb.WorkerServer.
func (w *fakeWorker) ModelAssets(context.Context, *controlpb.ModelAssetsRequest) (*controlpb.ModelAssetsResponse, error) {
	w.record("ModelAssets", nil, "")
	return w.assets, nil
}

// fakeShape is the layer geometry fakes report for their model: what
// adapters registered in tests are checked against.
var fakeShape = &controlpb.ModelShape{NumHiddenLayers: 2, HiddenSize: 512, IntermediateSize: 1024,
	NumAttentionHeads: 8, NumKeyValueHeads: 2, HeadDim: 64}

// loadedAdapter is one LoadAdapter stream a fake received.
type loadedAdapter struct {
	first   *controlpb.AdapterPart // without its weights
	weights []byte
	parts   int
}

// adapterMemory is what the fake's heartbeats report of its adapters.
func (w *fakeWorker) adapterMemory() *controlpb.AdapterMemory {
	w.mu.Lock()
	defer w.mu.Unlock()
	return proto.Clone(w.adapterMem).(*controlpb.AdapterMemory)
}

// needAdapter refuses a call under an adapter the fake does not hold.
func (w *fakeWorker) needAdapter(method string, ref *controlpb.AdapterRef, owner *controlpb.Owner) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ref.GetHash() != owner.GetAdapter() {
		return status.Errorf(codes.InvalidArgument, "adapter %q and owner.adapter %q differ", ref.GetHash(), owner.GetAdapter())
	}
	if w.adapters == nil || ref == nil || w.adapters[ref.GetHash()] {
		return nil
	}
	w.refusals = append(w.refusals, method+" "+ref.GetHash())
	return controlpb.AdapterNotLoaded(ref.GetHash()).Err()
}

// LoadAdapter implements controlpb.WorkerServer: it keeps the files'
// bytes as received and holds the adapter from then on.
func (w *fakeWorker) LoadAdapter(srv grpc.ClientStreamingServer[controlpb.AdapterPart, controlpb.LoadAdapterResponse]) error {
	var l loadedAdapter
	for {
		p, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if l.parts == 0 {
			l.first = proto.Clone(p).(*controlpb.AdapterPart)
			l.first.Weights = nil
		}
		l.parts++
		l.weights = append(l.weights, p.GetWeights()...)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refuseLoad {
		return status.Error(codes.ResourceExhausted, "adapter memory full of pinned adapters")
	}
	if l.first == nil || int64(len(l.weights)) != l.first.GetWeightsSize() {
		return status.Error(codes.InvalidArgument, "incomplete adapter")
	}
	w.loads = append(w.loads, &l)
	w.adapters[l.first.GetRef().GetHash()] = true
	return srv.SendAndClose(&controlpb.LoadAdapterResponse{Bytes: int64(len(l.weights))})
}

// Reserve implements controlpb.WorkerServer.
func (w *fakeWorker) Reserve(_ context.Context, req *controlpb.ReserveRequest) (*controlpb.ReserveResponse, error) {
	w.record("Reserve", req.Owner, "")
	if err := w.needAdapter("Reserve", req.Adapter, req.Owner); err != nil {
		return nil, err
	}
	if err := w.reserve(req.Owner, req.TotalTokens); err != nil {
		return nil, err
	}
	id := fmt.Sprintf("xfer-%s", req.Owner.RequestId)
	return &controlpb.ReserveResponse{Ticket: &controlpb.Ticket{TransferId: id, Owner: req.Owner,
		PromptTokens: req.PromptTokens, DecodeWorkerId: w.id, TransferBackend: "tcp", TransferAddr: "127.0.0.1:9"}}, nil
}

// Prefill implements controlpb.WorkerServer.
func (w *fakeWorker) Prefill(ctx context.Context, req *controlpb.PrefillRequest) (*controlpb.PrefillResponse, error) {
	w.record("Prefill", req.Owner, "")
	if err := w.needAdapter("Prefill", req.Adapter, req.Owner); err != nil {
		return nil, err
	}
	if w.failPrefill != nil {
		return nil, w.failPrefill
	}
	close(w.fabric.transfer(req.Ticket.TransferId))
	return &controlpb.PrefillResponse{PromptTokens: int64(len(req.Prompt))}, nil
}

// Abort implements controlpb.WorkerServer.
func (w *fakeWorker) Abort(_ context.Context, req *controlpb.AbortRequest) (*controlpb.AbortResponse, error) {
	w.record("Abort", req.Owner, req.Cause)
	w.mu.Lock()
	cancel := w.cancels[req.Owner.RequestId]
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.release(req.Owner.RequestId)
	return &controlpb.AbortResponse{Found: cancel != nil}, nil
}

// Generate implements controlpb.WorkerServer.
func (w *fakeWorker) Generate(req *controlpb.GenerateRequest, srv grpc.ServerStreamingServer[controlpb.GenerateEvent]) error {
	w.record("Generate", req.Owner, "")
	if err := w.needAdapter("Generate", req.Adapter, req.Owner); err != nil {
		return err
	}
	if c := req.Sampling.GetConstraint(); w.enforce != nil && c != "" {
		if _, err := w.enforce.Accept(nil, c); err != nil {
			return controlpb.ConstraintRefused(err)
		}
	}
	id := req.Owner.RequestId
	ctx, cancel := context.WithCancel(srv.Context())
	defer cancel()
	w.mu.Lock()
	w.cancels[id] = cancel
	w.maxSeen = append(w.maxSeen, req.Sampling.GetMaxTokens())
	w.specSeen = append(w.specSeen, req.Sampling.Speculative)
	w.mu.Unlock()
	defer w.release(id)
	if req.Ticket != nil {
		select {
		case <-w.fabric.transfer(req.Ticket.TransferId):
		case <-ctx.Done():
			return status.Error(codes.Aborted, "aborted while waiting for the transfer")
		}
	} else if err := w.reserve(req.Owner, int64(len(req.Prompt))+int64(req.Sampling.GetMaxTokens())); err != nil {
		return err
	}
	if err := srv.Send(&controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Ready{Ready: &controlpb.Ready{PromptTokens: int64(len(req.Prompt))}}}); err != nil {
		return err
	}
	if w.holdTokens != nil {
		select {
		case <-w.holdTokens:
		case <-ctx.Done():
			return status.Error(codes.Aborted, "aborted")
		}
	}
	ids := byteTokens(w.reply)
	maxTokens := int(req.Sampling.GetMaxTokens())
	finish, count := "stop", len(ids)+1 // EOS: counted, not sent
	if len(ids) >= maxTokens {
		ids, finish, count = ids[:maxTokens], "length", maxTokens
	}
	for i := 0; i < len(ids); i += 3 {
		if err := ctx.Err(); err != nil {
			return status.Error(codes.Aborted, "aborted")
		}
		chunk := ids[i:min(i+3, len(ids))]
		if err := srv.Send(&controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Tokens{Tokens: &controlpb.Tokens{Ids: chunk}}}); err != nil {
			return err
		}
		if i == 0 && w.tokensSent != nil {
			close(w.tokensSent)
		}
		if i == 0 && w.failGenerate != nil {
			return w.failGenerate
		}
	}
	if w.releaseBeforeDone {
		w.release(id)
	}
	return srv.Send(&controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Done{Done: &controlpb.Done{
		FinishReason: finish, PromptTokens: int64(len(req.Prompt)), CompletionTokens: int64(count)}}})
}
