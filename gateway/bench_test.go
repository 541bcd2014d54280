package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/controlpb"
)

// BenchmarkGatewayOverhead compares one short chat request through the
// gateway (HTTPS, authentication, tokenization, admission, tenant limits,
// routing, detokenization, the official OpenAI client) with the same
// generation asked of the worker directly over gRPC, in the same run. The
// worker is a fake that answers at once, so the ratio bounds what the
// gateway adds; against a real engine's time per request it is small.
func BenchmarkGatewayOverhead(b *testing.B) {
	tg := startGateway(b, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 4096, nil).start()
	direct := dialWorker(b, w.addr)
	client := tg.openai()
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
		resp, err := client.Chat.Completions.New(ctx, params)
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
