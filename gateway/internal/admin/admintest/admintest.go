// Package admintest provides fakes of the admin API's dependencies
// (admin.Cluster, admin.Requests) with sample data, for the tests of the
// admin handler and of its clients.
package admintest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/internal/adminclient"
)

// Epoch is the time of the sample data.
func Epoch() time.Time { return time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC) }

// Cluster is a fixed cluster view; set its fields before serving.
type Cluster struct {
	WorkerViews []admin.WorkerView
	ModelViews  []admin.ModelView
}

var _ admin.Cluster = (*Cluster)(nil)

// Workers implements admin.Cluster.
func (c *Cluster) Workers() []admin.WorkerView { return slices.Clone(c.WorkerViews) }

// Cordon implements admin.Cluster: it sets the sample worker's Cordoned.
func (c *Cluster) Cordon(id string, on bool) (admin.WorkerView, bool) {
	for i := range c.WorkerViews {
		if c.WorkerViews[i].ID == id {
			c.WorkerViews[i].Cordoned = on
			return c.WorkerViews[i], true
		}
	}
	return admin.WorkerView{}, false
}

// Models implements admin.Cluster.
func (c *Cluster) Models() []admin.ModelView { return slices.Clone(c.ModelViews) }

// NewCluster returns a sample cluster: a prefill worker whose pool (2048
// tokens) is smaller than model "tiny"'s configured context (8192), so tiny
// is clamped, and model "big/model" that agrees.
func NewCluster() *Cluster {
	epoch := Epoch()
	return &Cluster{
		WorkerViews: []admin.WorkerView{
			{ID: "w-prefill", Role: "prefill", Model: "tiny", ControlAddr: "127.0.0.1:9001", Healthy: true, LastHeartbeat: epoch,
				Pool: admin.PoolView{TotalPages: 128, FreePages: 128, PageTokens: 16, CapacityTokens: 2048}, Running: 1, Waiting: 2},
			{ID: "w-decode", Role: "decode", Model: "tiny", ControlAddr: "127.0.0.1:9002", TransferAddr: "127.0.0.1:9102",
				TransferBackend: "tcp", Healthy: true, LastHeartbeat: epoch,
				Pool: admin.PoolView{TotalPages: 256, FreePages: 250, ReservedPages: 4, InUsePages: 2, PageTokens: 16, CapacityTokens: 4096}},
		},
		ModelViews: []admin.ModelView{
			{Name: "tiny", ConfiguredContext: 8192, EffectiveContext: 2048, Policy: "clamp", Serving: true, Verdict: admin.VerdictClamped,
				Workers: []admin.WorkerCapacity{
					{ID: "w-prefill", Role: "prefill", CapacityTokens: 2048, WeightsDType: "f16",
						Memory: &admin.MemoryPlan{Source: "cgroup v2", LimitBytes: 4 << 30, AvailableBytes: 3 << 30, HeadroomBytes: 256 << 20,
							WeightsBytes: 2 << 30, BudgetBytes: 512 << 20}},
					{ID: "w-decode", Role: "decode", CapacityTokens: 4096, WeightsDType: "bf16",
						Memory: &admin.MemoryPlan{Source: "meminfo", LimitBytes: 60 << 30, AvailableBytes: 60 << 30, WeightsBytes: 2 << 30, BudgetBytes: 29 << 30},
						Adapters: &adminclient.AdapterMemoryView{CapacityBytes: 1 << 30, UsedBytes: 300 << 20,
							Loaded: []string{strings.Repeat("a", 64), strings.Repeat("b", 64)}, Pinned: []string{strings.Repeat("a", 64)}}},
				}},
			{Name: "big/model", ConfiguredContext: 1024, EffectiveContext: 1024, Policy: "refuse", Serving: true, Verdict: admin.VerdictAgree,
				Workers: []admin.WorkerCapacity{{ID: "w-both", Role: "both", CapacityTokens: 65536}}},
		},
	}
}

// Requests is a request table: requests in flight, finished ones, and the
// aborts it was asked for. Abort moves a request in flight to finished,
// state "aborted".
type Requests struct {
	mu       sync.Mutex
	inFlight map[string]admin.RequestView
	finished map[string]admin.RequestView
	aborts   []string // "id:cause"
}

var _ admin.Requests = (*Requests)(nil)

// NewRequests returns a sample table: req_a (globex) and req_b (acme) in
// flight, req_done (acme) completed.
func NewRequests() *Requests {
	epoch := Epoch()
	return &Requests{
		inFlight: map[string]admin.RequestView{
			"req_b": {ID: "req_b", Tenant: "acme", Model: "tiny", State: "decoding", PrefillWorker: "w-prefill", DecodeWorker: "w-decode",
				PromptTokens: 12, CompletionTokens: 3, Started: epoch.Add(2 * time.Second)},
			"req_a": {ID: "req_a", ClientRequestID: "client-1", Tenant: "globex", Model: "tiny", State: "prefilling", PromptTokens: 40, Started: epoch},
		},
		finished: map[string]admin.RequestView{
			"req_done": {ID: "req_done", Tenant: "acme", Model: "tiny", State: "completed", PromptTokens: 5, CompletionTokens: 7,
				Started: epoch, Finished: epoch.Add(time.Second)},
		},
	}
}

// List implements admin.Requests.
func (f *Requests) List() []admin.RequestView {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]admin.RequestView, 0, len(f.inFlight))
	for _, v := range f.inFlight {
		out = append(out, v)
	}
	return out
}

// Get implements admin.Requests.
func (f *Requests) Get(id string) (admin.RequestView, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.inFlight[id]; ok {
		return v, true
	}
	v, ok := f.finished[id]
	return v, ok
}

// Abort implements admin.Requests.
func (f *Requests) Abort(_ context.Context, id, cause string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborts = append(f.aborts, id+":"+cause)
	if _, ok := f.finished[id]; ok {
		return admin.ErrFinished
	}
	v, ok := f.inFlight[id]
	if !ok {
		return admin.ErrNotFound
	}
	delete(f.inFlight, id)
	v.State, v.Cause, v.Finished = "aborted", cause, Epoch().Add(time.Minute)
	f.finished[id] = v
	return nil
}

// Aborts returns the aborts asked for, as "id:cause", in order.
func (f *Requests) Aborts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.aborts)
}
