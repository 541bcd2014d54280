package worker

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tlsutil"
)

// TestDefenseInDepth: requests the gateway should never send are refused
// with the documented codes, and none leaves pages behind.
func TestDefenseInDepth(t *testing.T) {
	s := startPD(t, config.TransferTCP)
	bg := context.Background()
	dec, pre := s.decode.client, s.prefill.client
	decCap, preCap := int64(testPages*pageTokens), int64(testPages*3/4*pageTokens)

	// Above the pool: OutOfRange, nothing reserved.
	_, err := dec.Reserve(bg, &controlpb.ReserveRequest{Owner: owner("acme", "huge", 1), PromptTokens: 10, TotalTokens: decCap + 1})
	if code(err) != codes.OutOfRange || !strings.Contains(err.Error(), fmt.Sprintf("can never fit: %d tokens > pool capacity %d", decCap+1, decCap)) {
		t.Errorf("Reserve above capacity: %v", err)
	}
	if st := s.decode.rt.Pool.Stats(); st.Free != st.Total {
		t.Errorf("after a refused Reserve: %+v", st)
	}

	// A prompt decode can hold but prefill cannot: OutOfRange on prefill.
	o := owner("acme", "long", 1)
	n := int(preCap) + 1
	res, err := dec.Reserve(bg, &controlpb.ReserveRequest{Owner: o, PromptTokens: int64(n), TotalTokens: int64(n) + 4})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pre.Prefill(bg, &controlpb.PrefillRequest{Owner: o, Prompt: prompt(n, 1), Sampling: greedy(4), Ticket: res.GetTicket()})
	if code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "can never fit") {
		t.Errorf("Prefill above prefill's capacity: %v", err)
	}
	if st := s.prefill.rt.Pool.Stats(); st.Free != st.Total {
		t.Errorf("prefill after a refused Prefill: %+v", st)
	}

	// Decode Generate for another prompt length than the ticket's (the
	// 2026 incident: a 1-token placeholder behind a long prompt).
	got := generate(t, dec, &controlpb.GenerateRequest{Owner: o, Prompt: prompt(1, 1), Sampling: greedy(4), Ticket: res.GetTicket()})
	if code(got.err) != codes.InvalidArgument {
		t.Errorf("Generate with a 1-token prompt on a %d-token ticket: %v", n, got.err)
	}
	// The reservation survives a refused Generate; a second Reserve does not.
	if _, err := dec.Reserve(bg, &controlpb.ReserveRequest{Owner: o, PromptTokens: 4, TotalTokens: 8}); code(err) != codes.AlreadyExists {
		t.Errorf("second Reserve: %v, want AlreadyExists", err)
	}
	// A Prefill with a prompt other than the ticket's.
	_, err = pre.Prefill(bg, &controlpb.PrefillRequest{Owner: o, Prompt: prompt(3, 1), Sampling: greedy(4), Ticket: res.GetTicket()})
	if code(err) != codes.InvalidArgument {
		t.Errorf("Prefill with a 3-token prompt on a %d-token ticket: %v", n, err)
	}
	// A ticket used for another owner.
	_, err = pre.Prefill(bg, &controlpb.PrefillRequest{Owner: owner("evil", "long", 1), Prompt: prompt(n, 1), Sampling: greedy(4), Ticket: res.GetTicket()})
	if code(err) != codes.InvalidArgument {
		t.Errorf("Prefill with another owner's ticket: %v", err)
	}
	s.abortBoth(t, o)

	// The 2026 incident: prefill is handed a 1-token placeholder and a
	// ticket doctored to match it, while decode reserved for the long
	// prompt. Decode refuses the short transfer and generates nothing.
	o = owner("acme", "placeholder", 1)
	long := prompt(50, 3)
	res, err = dec.Reserve(bg, &controlpb.ReserveRequest{Owner: o, PromptTokens: 50, TotalTokens: 54})
	if err != nil {
		t.Fatal(err)
	}
	doctored := proto.Clone(res.GetTicket()).(*controlpb.Ticket)
	doctored.PromptTokens = 1
	var prefillErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		_, prefillErr = pre.Prefill(bg, &controlpb.PrefillRequest{Owner: o, Prompt: long[:1], Sampling: greedy(4), Ticket: doctored})
	})
	got = generate(t, dec, &controlpb.GenerateRequest{Owner: o, Prompt: long, Sampling: greedy(4), Ticket: res.GetTicket()})
	wg.Wait()
	if code(got.err) != codes.DataLoss || len(got.tokens) > 0 || got.ready >= 0 {
		t.Errorf("decode after a placeholder prefill: ready %d, %d tokens, %v; want DataLoss and nothing", got.ready, len(got.tokens), got.err)
	}
	if code(prefillErr) != codes.DataLoss {
		t.Errorf("placeholder Prefill: %v, want DataLoss", prefillErr)
	}
	s.abortBoth(t, o)

	// Full pool now, but not forever: ResourceExhausted.
	big := owner("acme", "big", 1)
	if _, err := dec.Reserve(bg, &controlpb.ReserveRequest{Owner: big, PromptTokens: 100, TotalTokens: decCap - pageTokens}); err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Reserve(bg, &controlpb.ReserveRequest{Owner: owner("acme", "small", 1), PromptTokens: 10, TotalTokens: 2 * pageTokens}); code(err) != codes.ResourceExhausted {
		t.Errorf("Reserve into a full pool: %v, want ResourceExhausted", err)
	}
	s.abortBoth(t, big)

	// Unknown requests and wrong roles.
	got = generate(t, dec, &controlpb.GenerateRequest{Owner: owner("acme", "nobody", 1), Prompt: prompt(3, 1), Sampling: greedy(4)})
	if code(got.err) != codes.NotFound {
		t.Errorf("Generate without Reserve on decode: %v, want NotFound", got.err)
	}
	if _, err := pre.Reserve(bg, &controlpb.ReserveRequest{Owner: o, PromptTokens: 1, TotalTokens: 2}); code(err) != codes.FailedPrecondition {
		t.Errorf("Reserve on prefill: %v", err)
	}
	if got := generate(t, pre, &controlpb.GenerateRequest{Owner: o, Prompt: prompt(3, 1), Sampling: greedy(4)}); code(got.err) != codes.FailedPrecondition {
		t.Errorf("Generate on prefill: %v", got.err)
	}
	if _, err := dec.Prefill(bg, &controlpb.PrefillRequest{Owner: o, Prompt: prompt(3, 1), Sampling: greedy(4)}); code(err) != codes.FailedPrecondition {
		t.Errorf("Prefill on decode: %v", err)
	}

	// Malformed input.
	for name, req := range map[string]*controlpb.ReserveRequest{
		"no owner":        {PromptTokens: 1, TotalTokens: 2},
		"no tenant":       {Owner: owner("", "r", 1), PromptTokens: 1, TotalTokens: 2},
		"no prompt":       {Owner: owner("a", "r", 1), PromptTokens: 0, TotalTokens: 2},
		"total < prompt":  {Owner: owner("a", "r", 1), PromptTokens: 5, TotalTokens: 2},
		"huge request id": {Owner: owner("a", strings.Repeat("r", 300), 1), PromptTokens: 1, TotalTokens: 2},
	} {
		if _, err := dec.Reserve(bg, req); code(err) != codes.InvalidArgument {
			t.Errorf("Reserve with %s: %v", name, err)
		}
	}
	res, err = dec.Reserve(bg, &controlpb.ReserveRequest{Owner: owner("acme", "bad", 1), PromptTokens: 3, TotalTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]*controlpb.PrefillRequest{
		"no ticket":           {Owner: owner("acme", "bad", 1), Prompt: prompt(3, 1), Sampling: greedy(4)},
		"empty prompt":        {Owner: owner("acme", "bad", 1), Sampling: greedy(4), Ticket: res.GetTicket()},
		"zero max tokens":     {Owner: owner("acme", "bad", 1), Prompt: prompt(3, 1), Sampling: greedy(0), Ticket: res.GetTicket()},
		"token outside vocab": {Owner: owner("acme", "bad", 1), Prompt: []int32{1, 2, 1 << 20}, Sampling: greedy(4), Ticket: res.GetTicket()},
	} {
		if _, err := pre.Prefill(bg, req); code(err) != codes.InvalidArgument {
			t.Errorf("Prefill with %s: %v", name, err)
		}
	}
	s.abortBoth(t, owner("acme", "bad", 1))
	waitQuiet(t, s.prefill, s.decode)
}

// TestClusterAuth (I10): only the gateway identity reaches the control
// server under mtls; only holders of the secret under shared_secret.
func TestClusterAuth(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	addr := w.controlLn.Addr().String()
	bg := context.Background()
	if _, err := w.client.Status(bg, &controlpb.StatusRequest{}); err != nil {
		t.Fatalf("gateway identity refused: %v", err)
	}
	for name, c := range map[string]controlpb.WorkerClient{
		"no client certificate": gatewayClient(t, addr, "", ""),
		"a worker certificate":  gatewayClient(t, addr, pki.WorkerCert, pki.WorkerKey),
	} {
		if _, err := c.Status(bg, &controlpb.StatusRequest{}); code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want the handshake refused", name, err)
		}
	}
	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := controlpb.NewWorkerClient(plain).Status(bg, &controlpb.StatusRequest{}); err == nil {
		t.Errorf("plaintext client accepted")
	}

	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, config.RoleBoth, config.TransferTCP, testPages)
	cfg.Cluster = config.Cluster{Auth: config.ClusterSharedSecret, CAFile: pki.CACert, CertFile: pki.WorkerCert,
		KeyFile: pki.WorkerKey, SharedSecretFile: secretFile}
	ss := startWorker(t, cfg)
	ssAddr := ss.controlLn.Addr().String()
	for name, tc := range map[string]struct {
		secret string
		want   codes.Code
	}{
		"the secret":   {"0123456789abcdef0123456789abcdef", codes.OK},
		"no secret":    {"", codes.Unauthenticated},
		"wrong secret": {"fedcba9876543210fedcba9876543210", codes.Unauthenticated},
	} {
		var opts []grpc.DialOption
		if tc.secret != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(tlsutil.NewSecretCredentials([]byte(tc.secret), true)))
		}
		c := gatewayClient(t, ssAddr, "", "", opts...)
		if _, err := c.Status(bg, &controlpb.StatusRequest{}); code(err) != tc.want {
			t.Errorf("shared secret, %s: %v, want %v", name, err, tc.want)
		}
	}
	if v := metricValue(t, ss.Worker, "warden_worker_requests_total", "rpc", "Status", "code", "Unauthenticated"); v != 2 {
		t.Errorf("refused calls counted %v times, want 2", v)
	}
}

// TestLivezWhileWeightsLoad: the metrics listener answers GET /livez
// while New is still loading the model (its config.json is a FIFO that
// blocks the load until the test writes it), with /readyz and /metrics
// 503 until Run serves; then /readyz turns 200. A Kubernetes liveness
// probe on /livez therefore never kills a worker for a slow load.
func TestLivezWhileWeightsLoad(t *testing.T) {
	dir := t.TempDir()
	entries, err := os.ReadDir(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "config.json" {
			continue
		}
		if err := os.Symlink(filepath.Join(modelDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	fifo := filepath.Join(dir, "config.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	cfg := testConfig(t, config.RoleBoth, config.TransferTCP, testPages)
	cfg.Worker.ModelDir = dir
	cfg.Observability.Metrics.Listen = deadAddr(t)
	base := "http://" + cfg.Observability.Metrics.Listen

	type result struct {
		w   *Worker
		err error
	}
	opened := make(chan result, 1)
	go func() {
		w, err := New(cfg, WithLogger(testLogger(t)))
		opened <- result{w, err}
	}()
	// A listener nobody serves accepts and never answers: bound the wait.
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string, error) {
		resp, err := client.Get(base + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	// Wait for the listener (bound at the start of New), never for time.
	deadline := time.Now().Add(time.Minute)
	for {
		code, _, err := get("/livez")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /livez during the load: %d %v", code, err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	select {
	case r := <-opened:
		t.Fatalf("New returned before the model's config.json was written: %v", r.err)
	default:
	}
	for _, path := range []string{"/readyz", "/metrics", "/healthz"} {
		if code, body, err := get(path); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
			t.Errorf("GET %s during the load: %d %q %v, want 503 starting", path, code, body, err)
		}
	}

	// Let the load go on: the real config.json through the FIFO, whose
	// path then holds the real file for later reads (the layout hash).
	data, err := os.ReadFile(filepath.Join(modelDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(real, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once the loader has it open
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(real, fifo); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-opened
	if r.err != nil {
		t.Fatal(r.err)
	}
	w := &started{Worker: r.w}
	stop := w.start()
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for {
		code, body, err := get("/readyz")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz after New: %d %q %v", code, body, err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	if body := httpGet(t, base+"/metrics"); !strings.Contains(body, "warden_kv_capacity_tokens 1024") {
		t.Errorf("/metrics after New lacks the pool's capacity:\n%s", body)
	}
	if body := httpGet(t, base+"/livez"); body != "ok\n" {
		t.Errorf("/livez while running: %q", body)
	}
}

// TestMetricsAndShutdown: /metrics and /healthz serve, and cancelling Run
// ends in-flight requests with Unavailable, frees their pages and removes
// the shm segment (checked by startWorker's cleanup).
func TestMetricsAndShutdown(t *testing.T) {
	cfg := testConfig(t, config.RoleBoth, config.TransferSHM, testPages)
	cfg.Observability.Metrics.Listen = "127.0.0.1:0"
	cfg.Worker.DrainTimeout = 0 // stopping aborts at once (TestDrainOnStop drains)
	w := newTestWorker(t, cfg)
	stop := w.start()
	client := w.client
	base := "http://" + w.metricsLn.Addr().String()

	got := generate(t, client, &controlpb.GenerateRequest{Owner: owner("acme", "m1", 1), Prompt: prompt(5, 1), Sampling: greedy(3)})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if _, err := client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: owner("acme", "held", 1), PromptTokens: 17, TotalTokens: 20}); err != nil {
		t.Fatal(err)
	}
	body := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`warden_kv_pages{state="reserved"} 2`,
		`warden_kv_pages{state="free"} 62`,
		`warden_kv_capacity_tokens 1024`,
		`warden_kv_owner_violations_total 0`,
		`warden_engine_tokens_total{kind="prefill"} 5`,
		`warden_worker_requests_total{code="OK",rpc="Generate"} 1`,
		`warden_worker_requests_in_flight{rpc="Generate"} 0`,
		`warden_transfer_bytes_total{direction="received"} 0`,
		`warden_decode_deferred_kv_release_total{outcome="drained"} 0`,
		"warden_engine_steps_total",
		"warden_engine_sequences",
		"warden_spec_proposed_tokens_total 0",
		"warden_spec_accepted_tokens_total 0",
		"warden_kv_fence_rejections_total",
		"warden_transfer_frames_total",
		"warden_transfer_checksum_failures_total",
		"warden_transfer_stale_frames_total",
		"warden_transfer_auth_failures_total",
		"warden_transfer_duration_seconds",
		"warden_decode_deferred_kv_release_seconds",
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if h := httpGet(t, base+"/healthz"); h != "ok\n" {
		t.Errorf("/healthz: %q", h)
	}

	// A request stalled mid-generation when the worker is told to stop.
	stalled := w.stallTokens(t)
	out := make(chan outcome, 1)
	go func() {
		stream, err := client.Generate(context.Background(), &controlpb.GenerateRequest{Owner: owner("acme", "m2", 1), Prompt: prompt(30, 2), Sampling: greedy(50)})
		out <- collect(t, stream, err)
	}()
	wait(t, stalled.reached, "the stalled generation")
	segment := w.segment.Path()
	pool := w.rt.Pool
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if o := <-out; code(o.err) != codes.Unavailable {
		t.Errorf("in-flight Generate at shutdown: %v, want Unavailable", o.err)
	}
	if s := pool.Stats(); s.Free != s.Total {
		t.Errorf("pool after shutdown: %+v", s)
	}
	if _, err := os.Stat(segment); !os.IsNotExist(err) {
		t.Errorf("shm segment %s still there: %v", segment, err)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

// TestBothWorker: a both worker refuses what its pool can never hold, and
// serves as the decode end of P/D when the gateway reserved on it.
func TestBothWorker(t *testing.T) {
	both := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	pre := startWorker(t, testConfig(t, config.RolePrefill, config.TransferTCP, testPages))
	got := generate(t, both.client, &controlpb.GenerateRequest{Owner: owner("acme", "huge", 1), Prompt: prompt(1000, 1), Sampling: greedy(100)})
	if code(got.err) != codes.OutOfRange || !strings.Contains(got.err.Error(), "can never fit: 1100 tokens > pool capacity 1024") {
		t.Errorf("Generate above capacity: %v", got.err)
	}

	p, sp := prompt(37, 4), greedy(6)
	want := runReference(t, [][]int32{p}, sp)[0]
	r := pd{prefill: pre, decode: both}.run(t, nil, owner("acme", "pd", 1), p, sp)
	if r.prefillErr != nil {
		t.Fatal(r.prefillErr)
	}
	checkAgainst(t, "both as decode", r.gen, want)
	waitQuiet(t, both, pre)
}

// TestCloseWithoutRun: a worker that never runs frees its ports and its
// shm segment on Close; a worker that cannot start says why and holds
// nothing.
func TestCloseWithoutRun(t *testing.T) {
	cfg := testConfig(t, config.RoleDecode, config.TransferSHM, testPages)
	w, err := New(cfg, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	seg, addr := w.segment.Path(), w.controlLn.Addr().String()
	if _, err := os.Stat(seg); err != nil {
		t.Fatalf("segment: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(seg); !os.IsNotExist(err) {
		t.Errorf("segment after Close: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("control port still taken after Close: %v", err)
	} else {
		ln.Close()
	}
	if err := w.Run(context.Background()); err == nil {
		t.Errorf("Run after Close succeeded")
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	bad := testConfig(t, config.RoleDecode, config.TransferSHM, testPages)
	bad.Worker.Transfer.Listen = taken.Addr().String()
	if _, err := New(bad, WithLogger(testLogger(t))); err == nil || !strings.Contains(err.Error(), "worker.transfer.listen") {
		t.Errorf("New with a taken transfer port: %v", err)
	}
	bad = testConfig(t, config.RoleDecode, config.TransferSHM, testPages)
	bad.Worker.ModelDir = t.TempDir()
	if _, err := New(bad, WithLogger(testLogger(t))); err == nil {
		t.Errorf("New without a model succeeded")
	}
	if left, _ := filepath.Glob(filepath.Join(shmDir, segmentName(bad.Worker.ID))); len(left) > 0 {
		t.Errorf("failed New left %v", left)
	}
}
