package worker

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestConstraintRefusedWhenUnenforceable: a constraint the worker cannot
// compile (the gateway refuses it first; this is the worker's own check)
// is InvalidArgument before anything is reserved.
func TestConstraintRefusedWhenUnenforceable(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	for i, wire := range []string{
		`{"json_schema":{"type":"string","pattern":"x"}}`,
		`{"regex":"("}`,
		`not json`,
		`{"json_object":true,"regex":"a"}`,
	} {
		sp := &controlpb.SamplingParams{MaxTokens: 8, Constraint: wire}
		got := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", "bad-"+string(rune('a'+i)), 1), Prompt: prompt(5, i), Sampling: sp})
		if code(got.err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", wire, got.err)
		}
	}
	waitQuiet(t, w)
}
