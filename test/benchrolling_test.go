package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/warden-ai/warden/cmd/warden/bench/rolling"
	"github.com/warden-ai/warden/internal/haproxyrun"
	"github.com/warden-ai/warden/test/harness"
)

// TestBenchRolling runs `warden bench rolling` for one round: the command
// starts its own fleet (2 gateways sharing a private redis-server, 2
// prefill and 2 decode workers, all child processes of the warden binary)
// behind HAProxy and restarts every process under 8 streaming clients.
// Its JSON report must show every request completed and equal to its
// reference, and a restart of each role.
func TestBenchRolling(t *testing.T) {
	if _, err := haproxyrun.Find(""); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatalf("%v; scripts/test.sh installs it", err)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("redis-server is not installed")
		}
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*harness.WaitTimeout)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, env.Bin, "bench", "rolling", "--duration", "1s", "--clients", "8", "--json", "--state-dir", dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rep rolling.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("bench rolling: %v, report %v\nstdout:\n%s\nstderr:\n%s", err, jerr, stdout.String(), stderr.String())
	}
	if err != nil {
		t.Errorf("bench rolling: %v\nstderr:\n%s", err, stderr.String())
	}
	if rep.Requests == 0 || rep.Lost != 0 || rep.Cut != 0 || rep.Mismatched != 0 || rep.Compared != rep.Completed || rep.Completed != rep.Requests {
		t.Errorf("report: %d requests, %d completed, %d lost, %d cut, %d of %d compared mismatched; errors %v",
			rep.Requests, rep.Completed, rep.Lost, rep.Cut, rep.Mismatched, rep.Compared, rep.Errors)
	}
	for _, role := range []string{"prefill", "decode", "gateway"} {
		if rep.Restarts[role] < 2 {
			t.Errorf("%d restarts of %s processes, want both: %v", rep.Restarts[role], role, rep.Restarts)
		}
	}
	if rep.Rounds != 1 {
		t.Errorf("%d rounds, want 1 for --duration 1s", rep.Rounds)
	}
	t.Logf("%d requests through haproxy over %d restarts, retries %v", rep.Requests, rep.Restarts["prefill"]+rep.Restarts["decode"]+rep.Restarts["gateway"], rep.Retries)
}
