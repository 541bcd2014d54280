package gateway

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
)

// maxRefusals bounds the refusals remembered per model.
const maxRefusals = 32

// layoutAgreement vets registering workers against the healthy workers of
// their model (invariant I11): every worker of one model must agree on
// page_tokens, the KV element type and layout, the weights hash and the
// tokenizer hash, since prefill writes KV pages that decode reads, and
// every worker must produce the reference tokens. A worker that disagrees
// is refused with a message naming both workers, counted, and remembered
// for the admin API and `warden check` until it registers successfully.
type layoutAgreement struct {
	reg     *registry.Registry
	metrics *metrics
	now     func() time.Time

	mu      sync.Mutex
	refused map[string]map[string]admin.LayoutRefusal // model → worker → refusal
}

func newLayoutAgreement(reg *registry.Registry, m *metrics) *layoutAgreement {
	return &layoutAgreement{reg: reg, metrics: m, now: time.Now, refused: make(map[string]map[string]admin.LayoutRefusal)}
}

// layoutFields are the values compared, in the order reported.
func layoutFields(pageTokens int64, tokenizer, dtype, kvLayout, weights string) [][2]string {
	return [][2]string{
		{"page_tokens", fmt.Sprint(pageTokens)},
		{"kv_dtype", dtype},
		{"kv_layout", kvLayout},
		{"weights_sha256", weights},
		{"tokenizer_sha256", tokenizer},
	}
}

// agree implements registry.Config.Agree.
func (l *layoutAgreement) agree(info *controlpb.WorkerInfo, pool *controlpb.PoolStats) error {
	mine := layoutFields(int64(pool.GetPageTokens()), info.GetTokenizerSha256(), info.GetKvDtype(), info.GetKvLayout(), info.GetWeightsSha256())
	for _, w := range l.reg.Healthy(info.GetModel()) {
		if w.ID == info.GetWorkerId() {
			continue
		}
		theirs := layoutFields(int64(w.Pool.PageTokens), w.TokenizerSHA256, w.KVDType, w.KVLayout, w.WeightsSHA256)
		for i, f := range mine {
			if f[1] == theirs[i][1] || f[1] == "" || theirs[i][1] == "" {
				continue // equal, or not reported (a worker of an older version)
			}
			err := fmt.Errorf("worker %s (%s) disagrees with worker %s (%s) of model %s: %s %s != %s; "+
				"prefill and decode of one model must share page_tokens, KV dtype and layout, weights and tokenizer (I11)",
				info.GetWorkerId(), registry.RoleName(info.GetRole()), w.ID, w.Role, info.GetModel(), f[0], f[1], theirs[i][1])
			l.record(info, w.ID, f[0], err.Error())
			return err
		}
	}
	l.forget(info.GetModel(), info.GetWorkerId())
	return nil
}

// record remembers a refusal and counts it.
func (l *layoutAgreement) record(info *controlpb.WorkerInfo, other, field, msg string) {
	l.metrics.layoutRefused(field)
	l.mu.Lock()
	defer l.mu.Unlock()
	byWorker := l.refused[info.GetModel()]
	if byWorker == nil {
		byWorker = make(map[string]admin.LayoutRefusal)
		l.refused[info.GetModel()] = byWorker
	}
	prev, seen := byWorker[info.GetWorkerId()]
	if !seen && len(byWorker) >= maxRefusals {
		return
	}
	byWorker[info.GetWorkerId()] = admin.LayoutRefusal{Worker: info.GetWorkerId(), Role: registry.RoleName(info.GetRole()),
		Conflicts: other, Field: field, Message: msg, At: l.now(), Attempts: prev.Attempts + 1}
}

// forget drops a worker's refusal once it registered.
func (l *layoutAgreement) forget(model, worker string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.refused[model], worker)
}

// refusals returns model's remembered refusals, by worker.
func (l *layoutAgreement) refusals(model string) []admin.LayoutRefusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]admin.LayoutRefusal, 0, len(l.refused[model]))
	for _, r := range l.refused[model] {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Worker < out[j].Worker })
	return out
}
