package runtime

import (
	"context"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// greedy runs prompt through r's engine and returns the generated tokens.
func greedy(t *testing.T, r *Runtime, name string, prompt []int32, n int) []int32 {
	t.Helper()
	ctx := context.Background()
	o := kvpool.Owner{Tenant: "test", Request: name, Epoch: 1}
	pages, err := r.Pool.Reserve(o, len(prompt)+n)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Pool.Release(o)
	st, err := r.Engine.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: prompt,
		Sampling: engine.Sampling{MaxTokens: n, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	var toks []int32
	for {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case engine.EventToken:
			toks = append(toks, ev.Token)
		case engine.EventDone:
			if ev.Result.Err != nil {
				t.Fatal(ev.Result.Err)
			}
			return toks
		}
	}
}

// start opens a runtime and runs its engine until the test ends.
func start(t *testing.T, opt Options) *Runtime {
	t.Helper()
	r, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		<-done
		r.Close()
	})
	return r
}
