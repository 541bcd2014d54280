package worker

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestConstraintRefusedWhenUnenforceable: a constraint the worker cannot
// compile, or one over its limits (the gateway refuses it first; this is
// the worker's own check), is InvalidArgument before anything is
// reserved, with the BadRequest detail that tells the gateway the
// client's constraint is at fault (a 400), saying why.
func TestConstraintRefusedWhenUnenforceable(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	for i, wire := range []string{
		`{"json_schema":{"type":"string","pattern":"x"}}`,
		`{"regex":"("}`,
		`not json`,
		`{"json_object":true,"regex":"a"}`,
		`{"choice":["` + strings.Repeat("<", 300<<10) + `"]}`,
	} {
		sp := &controlpb.SamplingParams{MaxTokens: 8, Constraint: wire}
		got := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", "bad-"+string(rune('a'+i)), 1), Prompt: prompt(5, i), Sampling: sp})
		reason, ok := controlpb.ConstraintRefusal(got.err)
		if code(got.err) != codes.InvalidArgument || !ok || reason == "" {
			t.Errorf("%.40s: %v (refusal %v), want InvalidArgument refusing the constraint", wire, got.err, ok)
		}
		if len(wire) > 300<<10 && !strings.Contains(reason, "constraint size limit exceeded: 307215 bytes, the limit is 262144 bytes") {
			t.Errorf("oversized: %q does not name the limit and the size", reason)
		}
	}
	waitQuiet(t, w)
}
