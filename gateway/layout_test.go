package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestLayoutAgreement (I11): a worker that disagrees with a healthy
// worker of its model on page_tokens, KV dtype or layout, weights or
// tokenizer is refused at registration with a message naming both
// workers, counted by field and remembered for the admin API; once it
// agrees it registers and is forgotten.
func TestLayoutAgreement(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), []string{"tiny"}, 0, func() float64 { return 0 }, func() float64 { return 0 },
		func() []registry.Snapshot { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var layouts *layoutAgreement
	reg := registry.New(registry.Config{
		Dial: func(addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		},
		Agree: func(i *controlpb.WorkerInfo, p *controlpb.PoolStats) error { return layouts.agree(i, p) },
	})
	t.Cleanup(reg.Close)
	layouts = newLayoutAgreement(reg, m)

	good := func(id string, role controlpb.Role) (*controlpb.WorkerInfo, *controlpb.PoolStats) {
		return &controlpb.WorkerInfo{WorkerId: id, Role: role, Model: "tiny", ControlAddr: "127.0.0.1:1", TransferAddr: "127.0.0.1:2",
				TransferBackend: "tcp", TokenizerSha256: "tok", KvDtype: "f32", KvLayout: "layer,kv,slot,kv_dim=2x2xTx64", WeightsSha256: "w"},
			&controlpb.PoolStats{TotalPages: 10, FreePages: 10, PageTokens: 16, CapacityTokens: 160}
	}
	register := func(i *controlpb.WorkerInfo, p *controlpb.PoolStats) error {
		_, err := reg.Register(context.Background(), &controlpb.RegisterRequest{Worker: i, Pool: p})
		return err
	}
	if err := register(good("prefill-a", controlpb.Role_ROLE_PREFILL)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field string
		edit  func(*controlpb.WorkerInfo, *controlpb.PoolStats)
	}{
		{"page_tokens", func(_ *controlpb.WorkerInfo, p *controlpb.PoolStats) { p.PageTokens, p.CapacityTokens = 32, 320 }},
		{"kv_dtype", func(i *controlpb.WorkerInfo, _ *controlpb.PoolStats) { i.KvDtype = "f16" }},
		{"kv_layout", func(i *controlpb.WorkerInfo, _ *controlpb.PoolStats) { i.KvLayout = "layer,kv,slot,kv_dim=4x2xTx64" }},
		{"weights_sha256", func(i *controlpb.WorkerInfo, _ *controlpb.PoolStats) { i.WeightsSha256 = "other" }},
		{"tokenizer_sha256", func(i *controlpb.WorkerInfo, _ *controlpb.PoolStats) { i.TokenizerSha256 = "other" }},
	} {
		i, p := good("decode-b", controlpb.Role_ROLE_DECODE)
		c.edit(i, p)
		err := register(i, p)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "decode-b") ||
			!strings.Contains(err.Error(), "prefill-a") || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Register = %v; want FailedPrecondition naming both workers and the field", c.field, err)
		}
		var out dto.Metric
		if err := m.refused.WithLabelValues(c.field + "_mismatch").Write(&out); err != nil || out.GetCounter().GetValue() != 1 {
			n := out.GetCounter().GetValue()
			t.Errorf("%s: counted %v times, want 1", c.field, n)
		}
		if r := layouts.refusals("tiny"); len(r) != 1 || r[0].Worker != "decode-b" || r[0].Conflicts != "prefill-a" || r[0].Field != c.field {
			t.Errorf("%s: refusals %+v", c.field, r)
		}
	}
	if ws := reg.Healthy("tiny"); len(ws) != 1 {
		t.Errorf("%d healthy workers after the refusals, want 1", len(ws))
	}
	if err := register(good("decode-b", controlpb.Role_ROLE_DECODE)); err != nil {
		t.Fatalf("an agreeing worker: %v", err)
	}
	if r := layouts.refusals("tiny"); len(r) != 0 {
		t.Errorf("refusals after it agreed: %+v", r)
	}
}
