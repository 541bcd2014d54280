package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
)

// TestLargeModelAssetsRegister: a worker whose tokenizer.json is the size
// of real ones (above gRPC's default 4 MiB receive limit; Llama 3's is 9 MB)
// registers, and the gateway tokenizes with it. The limit leaves room for
// the largest real tokenizers (35 MB).
func TestLargeModelAssetsRegister(t *testing.T) {
	if controlpb.MaxAssetsMessageBytes < 40<<20 || controlpb.MaxAssetFileBytes < 40<<20 {
		t.Fatalf("asset limits %d (message) and %d (file) do not fit a 35 MB tokenizer.json",
			controlpb.MaxAssetsMessageBytes, controlpb.MaxAssetFileBytes)
	}
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	// Trailing whitespace keeps the JSON valid and its meaning unchanged.
	big := append(bytes.Clone(tokFiles.tokenizerJSON), bytes.Repeat([]byte{' '}, 6<<20)...)
	sum := sha256.Sum256(big)
	w.sha = hex.EncodeToString(sum[:])
	w.assets.TokenizerJson, w.assets.TokenizerSha256 = big, w.sha
	w.start()
	if code, _, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5}); code != 200 {
		t.Fatalf("completion with the large tokenizer: %d %s", code, body)
	}
	if got := tg.tokenizers.get("tiny"); got == nil || got.sha != w.sha {
		t.Fatalf("the gateway's tokenizer of model tiny is not the registered one")
	}
}

// TestRefusedRegistrationsAreCounted: every refusal is counted by reason,
// and assets that do not hash to what the worker registered are refused.
func TestRefusedRegistrationsAreCounted(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.assets.TokenizerJson = append(bytes.Clone(tokFiles.tokenizerJSON), ' ') // hashes differently
	_, err := w.registryClient().Register(context.Background(), &controlpb.RegisterRequest{Worker: w.info(w.serve()), Pool: w.pool()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "hashes to") {
		t.Fatalf("Register with assets that do not match tokenizer_sha256 = %v", err)
	}
	stranger := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	stranger.model = "nope"
	_, err = stranger.registryClient().Register(context.Background(), &controlpb.RegisterRequest{Worker: stranger.info("127.0.0.1:1"), Pool: stranger.pool()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Register for an unknown model = %v", err)
	}
	code, exp := tg.admin(http.MethodGet, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics on the admin listener: %d %s", code, exp)
	}
	for _, want := range []string{
		`warden_worker_registrations_refused_total{reason="assets_invalid"} 1`,
		`warden_worker_registrations_refused_total{reason="unknown_model"} 1`,
	} {
		if !strings.Contains(string(exp), want) {
			t.Errorf("gateway /metrics lacks %s:\n%s", want, grepLines(exp, "refused"))
		}
	}
}
