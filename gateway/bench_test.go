package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker"
)

// BenchmarkGatewayOverhead compares one short chat request through the
// gateway (HTTPS, authentication, tokenization, admission, tenant limits,
// routing, detokenization, a JSON client) with the same
// generation asked of the worker directly over gRPC, in the same run. The
// worker is a fake that answers at once, so the ratio bounds what the
// gateway adds; against a real engine's time per request it is small.
func BenchmarkGatewayOverhead(b *testing.B) {
	tg := startGateway(b, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 4096, nil).start()
	direct := dialWorker(b, w.addr)
	client := tg.api()
	ctx := context.Background()
	prompt := chatPromptTokens(b, tg)
	params := chatParams(64)

	var directTime, gatewayTime time.Duration
	for b.Loop() {
		start := time.Now()
		stream, err := direct.Generate(ctx, &controlpb.GenerateRequest{
			Owner:  &controlpb.Owner{Tenant: "bench", RequestId: "direct", Epoch: 1},
			Prompt: make([]int32, prompt), Sampling: &controlpb.SamplingParams{MaxTokens: 64},
		})
		if err != nil {
			b.Fatal(err)
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if ev.GetDone() != nil {
				break
			}
		}
		directTime += time.Since(start)

		start = time.Now()
		resp, err := client.chat(ctx, params)
		if err != nil || resp.Choices[0].Message.Content != fakeReply {
			b.Fatalf("%v", err)
		}
		gatewayTime += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(directTime.Nanoseconds())/n, "direct-ns/req")
	b.ReportMetric(float64(gatewayTime.Nanoseconds())/n, "gateway-ns/req")
	b.ReportMetric(float64(gatewayTime)/float64(directTime), "gateway/direct")
}

// BenchmarkTracingOverhead measures what tracing every request costs end
// to end: two identical in-process clusters (gateway + prefill + decode
// worker on the tiny model, tcp transfer) serve the same greedy chat
// requests, one untraced (exporter none: no-op providers) and one with
// every process sampling 100% of traces into a batching processor (spans
// are built, batched and handed to an exporter that drops them). Each
// iteration runs benchRequests concurrent requests on each cluster in
// turn, alternating which goes first; the figure is the ratio
// traced/untraced of completion tokens per second (1.0: no cost). The
// cost is per request (about a dozen spans), so it shows most with short
// generations on the tiny model, whose tokens take microseconds.
func BenchmarkTracingOverhead(b *testing.B) {
	const benchRequests = 4
	// provider is one traced process's provider.
	provider := func() trace.TracerProvider {
		p := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		return p
	}
	cluster := func(name string, traced bool) *testGateway {
		var gwOpts []Option
		workerOpts := func() []worker.Option { return nil }
		if traced {
			gwOpts = append(gwOpts, WithTracerProvider(provider()))
			workerOpts = func() []worker.Option { return []worker.Option{worker.WithTracerProvider(provider())} }
		}
		tg := startGatewayWith(b, testConfig(), gwOpts...)
		reg := tg.RegistryAddr().String()
		startReal(b, workerConfig(b, name+"-decode", config.RoleDecode, config.TransferTCP, reg), workerOpts()...).attach(tg)
		startReal(b, workerConfig(b, name+"-prefill", config.RolePrefill, config.TransferTCP, reg), workerOpts()...).attach(tg)
		return tg
	}
	off, on := cluster("untraced", false), cluster("traced", true)
	// run serves benchRequests requests at once and returns the completion
	// tokens and the wall time.
	run := func(b *testing.B, tg *testGateway, maxTokens int64) (int64, time.Duration) {
		client := tg.api()
		start := time.Now()
		var tokens atomic.Int64
		var wg sync.WaitGroup
		for range benchRequests {
			wg.Go(func() {
				resp, err := client.chat(context.Background(), realChat(maxTokens))
				if err != nil {
					b.Error(err)
					return
				}
				tokens.Add(resp.Usage.CompletionTokens)
			})
		}
		wg.Wait()
		return tokens.Load(), time.Since(start)
	}
	run(b, off, 8) // warm both up: connections, tokenizer caches
	run(b, on, 8)
	for _, maxTokens := range []int64{32, 256} {
		b.Run(fmt.Sprintf("max_tokens=%d", maxTokens), func(b *testing.B) {
			var offTokens, onTokens int64
			var offTime, onTime time.Duration
			for i := 0; b.Loop(); i++ {
				for _, traced := range [2]bool{i%2 == 1, i%2 == 0} {
					if traced {
						n, d := run(b, on, maxTokens)
						onTokens, onTime = onTokens+n, onTime+d
					} else {
						n, d := run(b, off, maxTokens)
						offTokens, offTime = offTokens+n, offTime+d
					}
				}
			}
			offRate, onRate := float64(offTokens)/offTime.Seconds(), float64(onTokens)/onTime.Seconds()
			b.ReportMetric(offRate, "untraced-tok/s")
			b.ReportMetric(onRate, "traced-tok/s")
			b.ReportMetric(onRate/offRate, "traced/untraced")
		})
	}
}
