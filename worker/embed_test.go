package worker

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
)

// tinyPageTokens is the tiny model's KV page size in tokens.
const tinyPageTokens = 16

func embedInputs(lens ...int) []*controlpb.EmbedInput {
	out := make([]*controlpb.EmbedInput, len(lens))
	for i, n := range lens {
		out[i] = &controlpb.EmbedInput{Tokens: prompt(n, i+1)}
	}
	return out
}

// TestEmbed: Embed on a both worker returns one normalised vector per
// input, each the same whether its input ran alone or batched with
// others, counts the positions, and frees every page; bad calls are
// refused with the codes the gateway maps, on a decode worker too.
func TestEmbed(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	ctx := context.Background()
	inputs := embedInputs(37, 5, 16)
	resp, err := w.client.Embed(ctx, &controlpb.EmbedRequest{Owner: owner("acme", "e", 1), Inputs: inputs, Pooling: controlpb.Pooling_POOLING_LAST})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEmbeddings()) != 3 || resp.GetPromptTokens() != 37+5+16 {
		t.Fatalf("%d vectors, %d prompt tokens; want 3, %d", len(resp.GetEmbeddings()), resp.GetPromptTokens(), 37+5+16)
	}
	for i, e := range resp.GetEmbeddings() {
		var ss float64
		for _, v := range e.GetValues() {
			ss += float64(v) * float64(v)
		}
		if len(e.GetValues()) != w.rt.Engine.HiddenSize() || math.Abs(math.Sqrt(ss)-1) > 1e-5 {
			t.Fatalf("vector %d: %d dimensions, norm %v", i, len(e.GetValues()), math.Sqrt(ss))
		}
		alone, err := w.client.Embed(ctx, &controlpb.EmbedRequest{Owner: owner("acme", fmt.Sprint("alone-", i), 1),
			Inputs: inputs[i : i+1], Pooling: controlpb.Pooling_POOLING_LAST})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(alone.GetEmbeddings()[0].GetValues(), e.GetValues()) {
			t.Fatalf("vector %d differs alone and batched", i)
		}
	}
	mean, err := w.client.Embed(ctx, &controlpb.EmbedRequest{Owner: owner("acme", "mean", 1), Inputs: inputs[:1], Pooling: controlpb.Pooling_POOLING_MEAN})
	if err != nil || slices.Equal(mean.GetEmbeddings()[0].GetValues(), resp.GetEmbeddings()[0].GetValues()) {
		t.Fatalf("mean pooling: %v, or the same vector as last pooling", err)
	}
	waitQuiet(t, w)

	for name, c := range map[string]struct {
		req  *controlpb.EmbedRequest
		want codes.Code
	}{
		"no inputs":   {&controlpb.EmbedRequest{Owner: owner("acme", "x", 1), Pooling: controlpb.Pooling_POOLING_LAST}, codes.InvalidArgument},
		"empty input": {&controlpb.EmbedRequest{Owner: owner("acme", "x", 1), Inputs: embedInputs(3, 0), Pooling: controlpb.Pooling_POOLING_LAST}, codes.InvalidArgument},
		"no pooling":  {&controlpb.EmbedRequest{Owner: owner("acme", "x", 1), Inputs: embedInputs(3)}, codes.InvalidArgument},
		"no owner":    {&controlpb.EmbedRequest{Inputs: embedInputs(3), Pooling: controlpb.Pooling_POOLING_LAST}, codes.InvalidArgument},
		"never fits":  {&controlpb.EmbedRequest{Owner: owner("acme", "x", 1), Inputs: embedInputs(testPages*tinyPageTokens, 1), Pooling: controlpb.Pooling_POOLING_LAST}, codes.OutOfRange},
	} {
		if _, err := w.client.Embed(ctx, c.req); code(err) != c.want {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	d := startWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages))
	if _, err := d.client.Embed(ctx, &controlpb.EmbedRequest{Owner: owner("acme", "d", 1), Inputs: embedInputs(3), Pooling: controlpb.Pooling_POOLING_LAST}); code(err) != codes.FailedPrecondition {
		t.Errorf("Embed on a decode worker: %v, want FailedPrecondition", err)
	}
	waitQuiet(t, w, d)
}

// TestEmbedAbort: an Embed waiting for pages (a generation holds them)
// or about to run ends Aborted when the gateway aborts it, and
// cancelling the call ends it too; nothing stays reserved.
func TestEmbedAbort(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, 8))
	bg := context.Background()
	st := w.stallTokens(t)
	gen := make(chan outcome, 1)
	go func() {
		stream, err := w.client.Generate(bg, &controlpb.GenerateRequest{Owner: owner("acme", "g", 1), Prompt: prompt(20, 1), Sampling: greedy(80)})
		gen <- collect(t, stream, err)
	}()
	wait(t, st.reached, "the first tokens")
	for _, byAbort := range []bool{true, false} {
		o := owner("acme", fmt.Sprint("embed-", byAbort), 1)
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() {
			_, err := w.client.Embed(ctx, &controlpb.EmbedRequest{Owner: o, Inputs: embedInputs(5 * tinyPageTokens), Pooling: controlpb.Pooling_POOLING_LAST})
			done <- err
		}()
		want := codes.Canceled
		if byAbort {
			if _, err := w.client.Abort(bg, &controlpb.AbortRequest{Owner: o, Cause: "admin"}); err != nil {
				t.Fatal(err)
			}
			want = codes.Aborted
		} else {
			cancel()
		}
		if err := <-done; code(err) != want {
			t.Errorf("Embed: %v, want %v", err, want)
		}
		cancel()
	}
	st.unblock()
	if out := <-gen; out.err != nil {
		t.Fatalf("the generation: %v", out.err)
	}
	waitQuiet(t, w)
}
