package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker"
	"github.com/warden-ai/warden/worker/engine"
)

// The tiny model's KV pages hold 16 tokens in 8 KiB.
const (
	tinyPageBytes = 8192
	workerPages   = 128 // 2048 tokens
)

var realN atomic.Int64

// realWorker is an in-process worker (package worker) on the tiny model.
type realWorker struct {
	t      testing.TB
	id     string
	cfg    *config.Config
	stop   context.CancelFunc
	done   chan error
	client controlpb.WorkerClient
}

// workerConfig is a worker of role registering with the gateway at
// registry.
func workerConfig(t testing.TB, id string, role config.Role, backend config.TransferBackend, registry string) *config.Config {
	t.Helper()
	cfg := config.Default()
	w := &cfg.Worker
	w.ID, w.Role, w.ModelDir, w.Threads = id, role, modelDir, 1
	w.Listen, w.Transfer.Listen = "127.0.0.1:0", "127.0.0.1:0"
	w.Transfer.Backend, w.Transfer.SHMDir = backend, shmDir
	w.KV.MemoryBytes = config.ByteSize(workerPages * tinyPageBytes)
	w.KV.PoisonOnReserve = true
	w.MaxBatch = 4
	w.HeartbeatInterval = 100 * time.Millisecond
	w.Gateways = []string{registry}
	cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: pki.CACert, CertFile: pki.WorkerCert, KeyFile: pki.WorkerKey}
	cfg.Observability.LogLevel = "error"
	if err := cfg.ValidateWorker(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startReal runs a worker until the test ends (or kill); opts come after
// the test logger and a private metrics registry.
func startReal(t testing.TB, cfg *config.Config, opts ...worker.Option) *realWorker {
	t.Helper()
	w, err := worker.New(cfg, append([]worker.Option{worker.WithLogger(testLogger(t)), worker.WithRegistry(prometheus.NewRegistry())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &realWorker{t: t, id: cfg.Worker.ID, cfg: cfg, stop: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(rw.kill)
	return rw
}

// kill stops the worker (once) and waits for Run.
func (rw *realWorker) kill() {
	rw.stop()
	if err, ok := <-rw.done; ok {
		close(rw.done)
		if err != nil {
			rw.t.Errorf("worker %s: Run: %v", rw.id, err)
		}
	}
}

// attach waits until the gateway lists the worker as healthy and dials it
// with the gateway's identity, for Status.
func (rw *realWorker) attach(tg *testGateway) *realWorker {
	rw.t.Helper()
	var addr string
	waitFor(rw.t, "worker "+rw.id+" to register", func() bool {
		w, ok := tg.reg.Get(rw.id)
		if !ok {
			return false
		}
		s := w.Snapshot()
		addr = s.ControlAddr
		return s.Healthy
	})
	rw.client = dialWorker(rw.t, addr)
	return rw
}

func dialWorker(t testing.TB, addr string) controlpb.WorkerClient {
	t.Helper()
	tc, err := tlsutil.ClusterClientConfig(pki.CACert, pki.GatewayCert, pki.GatewayKey, tlsutil.PeerWorker)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlpb.NewWorkerClient(conn)
}

// poolQuiet waits until every page of the worker is free again (free +
// reserved + in-use + quarantined = total, with only free pages).
func (rw *realWorker) poolQuiet() {
	rw.t.Helper()
	waitFor(rw.t, "worker "+rw.id+" to free every page", func() bool {
		st, err := rw.client.Status(context.Background(), &controlpb.StatusRequest{})
		if err != nil {
			return false
		}
		p := st.GetPool()
		return p.FreePages == p.TotalPages && p.ReservedPages+p.InUsePages+p.QuarantinedPages == 0 && len(st.Requests) == 0
	})
}

// reference runs prompt with greedy decoding on a stand-alone both
// worker, called directly, and decodes its tokens as text: what the
// gateway must return for the same prompt.
type reference struct {
	text       string
	finish     string
	prompt     int64
	completion int64
	ids        []int32 // the generated tokens (refWorker.runSampling)
}

func runReference(t *testing.T, prompt []int32, maxTokens int32) reference {
	t.Helper()
	// The stand-alone worker registers with a registry that only records
	// its control address.
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
	defer srv.Stop()
	rw := startReal(t, workerConfig(t, fmt.Sprintf("ref-%d", realN.Add(1)), config.RoleBoth, config.TransferTCP, ln.Addr().String()))
	defer rw.kill()
	client := dialWorker(t, <-addrs)

	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := client.Generate(context.Background(), &controlpb.GenerateRequest{
		Owner:  &controlpb.Owner{Tenant: "ref", RequestId: "ref", Epoch: 1},
		Prompt: prompt, Sampling: &controlpb.SamplingParams{Temperature: 0, TopP: 1, MaxTokens: maxTokens},
	})
	if err != nil {
		t.Fatal(err)
	}
	dec := tokenizer.NewStreamDecoder(tok)
	var b strings.Builder
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		for _, id := range ev.GetTokens().GetIds() {
			if tok.IsSpecial(id) {
				continue
			}
			s, err := dec.Add(id)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(s)
		}
		if d := ev.GetDone(); d != nil {
			return reference{text: b.String() + dec.Flush(), finish: d.FinishReason, prompt: d.PromptTokens, completion: d.CompletionTokens}
		}
	}
}

type recordingRegistry struct {
	controlpb.UnimplementedRegistryServer
	addr chan string
}

func (r *recordingRegistry) Register(_ context.Context, req *controlpb.RegisterRequest) (*controlpb.RegisterResponse, error) {
	select {
	case r.addr <- req.Worker.ControlAddr:
	default:
	}
	return &controlpb.RegisterResponse{HeartbeatIntervalMs: 100}, nil
}

func (r *recordingRegistry) Heartbeat(context.Context, *controlpb.HeartbeatRequest) (*controlpb.HeartbeatResponse, error) {
	return &controlpb.HeartbeatResponse{}, nil
}

// chatTokens is the chat prompt as the model's chat template renders it.
func chatTokens(t *testing.T, content string) []int32 {
	t.Helper()
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: content}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

const realPrompt = "Tell me a story about a tiny model."

func realChat(maxTokens int64) chatCompletionRequest {
	return chatCompletionRequest{
		Model:       "tiny",
		Messages:    []chatMessage{userMessage(realPrompt)},
		MaxTokens:   &maxTokens,
		Temperature: new(0.0),
	}
}

// checkChat runs realChat non-streaming and streaming through the API
// client and compares both with the reference.
func checkChat(t *testing.T, tg *testGateway, ref reference, maxTokens int64) {
	t.Helper()
	client := tg.api()
	resp, err := client.chat(context.Background(), realChat(maxTokens))
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.Message.Content != ref.text || string(c.FinishReason) != ref.finish {
		t.Fatalf("chat = %q/%s, reference %q/%s", c.Message.Content, c.FinishReason, ref.text, ref.finish)
	}
	if resp.Usage.PromptTokens != ref.prompt || resp.Usage.CompletionTokens != ref.completion {
		t.Fatalf("usage %d/%d, reference %d/%d", resp.Usage.PromptTokens, resp.Usage.CompletionTokens, ref.prompt, ref.completion)
	}
	params := realChat(maxTokens)
	params.StreamOptions = &streamOptions{IncludeUsage: true}
	stream := client.chatStream(context.Background(), params)
	var text, finish string
	var usage completionUsage
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			text += c.Delta.Content
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text != ref.text || finish != ref.finish || usage.CompletionTokens != ref.completion || usage.PromptTokens != ref.prompt {
		t.Fatalf("stream = %q/%s usage %d/%d, reference %q/%s %d/%d", text, finish, usage.PromptTokens, usage.CompletionTokens,
			ref.text, ref.finish, ref.prompt, ref.completion)
	}
}

func TestRealWorkersMatchReference(t *testing.T) {
	const maxTokens = 24
	ref := runReference(t, chatTokens(t, realPrompt), maxTokens)
	if ref.completion == 0 || ref.text == "" {
		t.Fatalf("empty reference %+v", ref)
	}
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := tok.BOS()
	plain, _ := tok.Encode("Once upon a time")
	refCompletion := runReference(t, append([]int32{bos}, plain...), 12)

	t.Run("single node", func(t *testing.T) {
		tg := startGateway(t, testConfig())
		w := startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
		checkChat(t, tg, ref, maxTokens)
		client := tg.api()
		resp, err := client.completions(context.Background(), completionRequest{
			Model: "tiny", Prompt: "Once upon a time", MaxTokens: new(int64(12)), Temperature: new(0.0),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Text != refCompletion.text || resp.Usage.PromptTokens != refCompletion.prompt {
			t.Fatalf("completion %q (%d prompt tokens), reference %q (%d)", resp.Choices[0].Text, resp.Usage.PromptTokens,
				refCompletion.text, refCompletion.prompt)
		}
		w.poolQuiet()
	})
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run("P/D "+string(backend), func(t *testing.T) {
			tg := startGateway(t, testConfig())
			reg := tg.RegistryAddr().String()
			d := startReal(t, workerConfig(t, "decode-"+string(backend), config.RoleDecode, backend, reg)).attach(tg)
			p := startReal(t, workerConfig(t, "prefill-"+string(backend), config.RolePrefill, backend, reg)).attach(tg)
			checkChat(t, tg, ref, maxTokens)
			for _, s := range tg.table.List() {
				v := requestView(s)
				if v.PrefillWorker != p.id || v.DecodeWorker != d.id || v.State != "completed" {
					t.Errorf("request %+v did not go through P/D", v)
				}
			}
			d.poolQuiet()
		})
	}
}

func TestRealClientDisconnectFreesEverything(t *testing.T) {
	tg := startGateway(t, testConfig())
	reg := tg.RegistryAddr().String()
	d := startReal(t, workerConfig(t, "decode-dc", config.RoleDecode, config.TransferTCP, reg)).attach(tg)
	p := startReal(t, workerConfig(t, "prefill-dc", config.RolePrefill, config.TransferTCP, reg)).attach(tg)
	// Hold the request once decode is ready, until the client has gone.
	hold := func(ctx context.Context) { <-ctx.Done() }
	tg.hooks.afterReady.Store(&hold)
	ctx, cancel := context.WithCancel(context.Background())
	stream := tg.api().chatStream(ctx, realChat(64))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	s := tg.only()
	cancel()
	stream.Close()
	s = tg.finished(s.ID)
	if s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseClientDisconnect || s.Stage != lifecycle.Decoding {
		t.Fatalf("request %+v", s)
	}
	for _, w := range s.Workers {
		if !w.AbortSent {
			waitFor(t, "the aborts", func() bool {
				snap, _ := tg.table.Get(s.ID)
				for _, w := range snap.Workers {
					if !w.AbortSent {
						return false
					}
				}
				return true
			})
			break
		}
	}
	d.poolQuiet()
	p.poolQuiet()
}

func TestRealWorkerKilledAndBack(t *testing.T) {
	cfg := testConfig()
	cfg.Gateway.HeartbeatTimeout = 2 * time.Second
	tg := startGateway(t, cfg)
	reg := tg.RegistryAddr().String()
	dcfg := workerConfig(t, "decode-k", config.RoleDecode, config.TransferTCP, reg)
	dcfg.Worker.DrainTimeout = 0 // killed: no drain
	d := startReal(t, dcfg).attach(tg)
	p := startReal(t, workerConfig(t, "prefill-k", config.RolePrefill, config.TransferTCP, reg)).attach(tg)

	// Kill decode while it holds the request's reservation and waits for
	// its KV (Generate open, Prefill not sent yet).
	kill := func(context.Context) { d.kill() }
	tg.hooks.beforePrefill.Store(&kill)
	_, err := tg.api().chat(context.Background(), realChat(16))
	var apiErr *apiError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || !strings.Contains(apiErr.Message, "retry") {
		t.Fatalf("request on a killed worker: %v", err)
	}
	tg.hooks.beforePrefill.Store(nil)
	s := tg.only()
	s = tg.finished(s.ID)
	if s.State != lifecycle.Failed || s.Cause != causeWorkerGone {
		t.Fatalf("request %+v", s)
	}
	waitFor(t, "the killed worker to be marked down", func() bool {
		w, _ := tg.reg.Get("decode-k")
		return !w.Snapshot().Healthy
	})
	// Admission hears of the loss from the registry's change feed, just
	// after the registry marked the worker down.
	waitFor(t, "the gateway to be unready without a decode worker", func() bool { return tg.Ready() != nil })
	p.poolQuiet()

	// The same worker ID comes back (a restarted process) and serves.
	d2 := startReal(t, dcfg).attach(tg)
	ref := runReference(t, chatTokens(t, realPrompt), 16)
	checkChat(t, tg, ref, 16)
	d2.poolQuiet()
	p.poolQuiet()
}

// TestRealPrefillDecodeChoices: n = 3 with a seed and logprobs through
// real prefill and decode workers: each choice, its text and its
// logprobs (the first token's from the prefill worker) equal a single
// request with the choice's derived seed; usage counts the prompt once;
// every page ends free on both workers.
func TestRealPrefillDecodeChoices(t *testing.T) {
	tg := startGateway(t, testConfig())
	reg := tg.RegistryAddr().String()
	d := startReal(t, workerConfig(t, "decode-n", config.RoleDecode, config.TransferTCP, reg)).attach(tg)
	p := startReal(t, workerConfig(t, "prefill-n", config.RolePrefill, config.TransferTCP, reg)).attach(tg)
	ctx := context.Background()
	client := tg.api()
	const seed = 5
	params := realChat(12)
	params.Temperature, params.Seed, params.Logprobs, params.TopLogprobs = new(1.0), new(int64(seed)), new(true), new(int64(2))
	params.N = new(int64(3))
	resp, err := client.chat(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	var completion int64
	single := params
	single.N = new(int64(1))
	for k := range 3 {
		single.Seed = new(int64(engine.ChoiceSeed(seed, k)))
		alone, err := client.chat(ctx, single)
		if err != nil {
			t.Fatal(err)
		}
		got, want := resp.Choices[k], alone.Choices[0]
		if got.Index != int64(k) || got.Message.Content != want.Message.Content || got.FinishReason != want.FinishReason {
			t.Fatalf("choice %d = %q (%s), alone with its seed %q (%s)", k, got.Message.Content, got.FinishReason, want.Message.Content, want.FinishReason)
		}
		if len(got.Logprobs.Content) != len(want.Logprobs.Content) || len(got.Logprobs.Content) == 0 {
			t.Fatalf("choice %d: %d logprobs, alone %d", k, len(got.Logprobs.Content), len(want.Logprobs.Content))
		}
		for i, lp := range got.Logprobs.Content {
			if w := want.Logprobs.Content[i]; lp.Token != w.Token || lp.Logprob != w.Logprob || len(lp.TopLogprobs) != 2 {
				t.Fatalf("choice %d token %d: logprob %s %v, alone %s %v", k, i, lp.Token, lp.Logprob, w.Token, w.Logprob)
			}
		}
		completion += alone.Usage.CompletionTokens
		if resp.Usage.PromptTokens != alone.Usage.PromptTokens {
			t.Fatalf("n = 3 usage %+v, one choice's prompt %d: the prompt counts once", resp.Usage, alone.Usage.PromptTokens)
		}
	}
	if resp.Usage.CompletionTokens != completion {
		t.Fatalf("n = 3 completion tokens %d, the choices' sum %d", resp.Usage.CompletionTokens, completion)
	}
	d.poolQuiet()
	p.poolQuiet()
}
