package clitest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/gateway/internal/admin/admintest"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker/model"
)

// tinyShape is the shape model tiny's workers report in these tests.
var tinyShape = &model.Config{NumHiddenLayers: 2, HiddenSize: 64, IntermediateSize: 128, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16}

// TestAdapterCommands: `warden admin adapter add` uploads a PEFT
// directory; list, show, share and rm work on it; bad files are refused
// with lora's reason.
func TestAdapterCommands(t *testing.T) {
	g := startGateway(t, admintest.NewCluster())
	for _, id := range []string{"acme", "beta", "gamma"} {
		if _, err := g.store.CreateTenant(t.Context(), tenant.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, w, err := lora.Random(tinyShape, lora.Config{Rank: 2, Alpha: 4, Targets: []lora.Module{lora.K, lora.Up}}, 0.01, 5)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if os.WriteFile(filepath.Join(dir, "adapter_config.json"), cfg, 0o600) != nil ||
		os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), w, 0o600) != nil {
		t.Fatal("writing the adapter")
	}
	out := g.ok(t, "adapter", "add", "--base", "tiny", "--name", "support", "--owner", "acme", "--share", "beta", "--pin", dir)
	rs := rows(out)
	if len(rs) != 2 || strings.Join(rs[1], " ") != "tiny:support tiny acme beta 2 "+strconv.Itoa(2*4*(2*64+32*2+2*64+128*2))+" true" {
		t.Fatalf("adapter add:\n%s", out)
	}
	stored, err := g.store.GetAdapter(t.Context(), "tiny:support")
	if err != nil || stored.Hash != lora.Hash(cfg, w) {
		t.Fatalf("stored %+v, %v; want hash %s", stored, err, lora.Hash(cfg, w))
	}
	if out := g.ok(t, "adapter", "show", "tiny:support"); !strings.Contains(out, stored.Hash) || !strings.Contains(out, "k_proj,up_proj") {
		t.Fatalf("adapter show:\n%s", out)
	}
	g.ok(t, "adapter", "share", "tiny:support", "--with", "gamma")
	if out := g.ok(t, "adapter", "list"); len(rows(out)) != 2 || rows(out)[1][3] != "gamma" {
		t.Fatalf("adapter list after share:\n%s", out)
	}
	g.ok(t, "adapter", "rm", "tiny:support")
	if code, _, errOut := g.admin(t, "adapter", "show", "tiny:support"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("show after rm: exit %d, %s", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"r":4,"lora_alpha":8,"target_modules":["lm_head"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := g.admin(t, "adapter", "add", "--base", "tiny", "--name", "bad", "--owner", "acme", dir)
	if code == 0 || !strings.Contains(errOut, `target module "lm_head"`) {
		t.Fatalf("add of a bad adapter: exit %d, %s", code, errOut)
	}
}
