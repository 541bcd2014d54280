package gateway

import (
	"context"
	"errors"
	"slices"

	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/controlpb"
)

// clusterView adapts the registry and admission to the admin API.
type clusterView struct{ g *Gateway }

var _ admin.Cluster = clusterView{}

// Workers implements admin.Cluster.
func (c clusterView) Workers() []admin.WorkerView {
	ws := c.g.reg.Workers()
	out := make([]admin.WorkerView, len(ws))
	for i, w := range ws {
		out[i] = workerView(w)
	}
	return out
}

func workerView(w registry.Snapshot) admin.WorkerView {
	p := w.Pool
	return admin.WorkerView{
		ID: w.ID, Role: w.Role, Model: w.Model,
		ControlAddr: w.ControlAddr, TransferAddr: w.TransferAddr, TransferBackend: w.TransferBackend,
		Healthy: w.Healthy, LastHeartbeat: w.LastHeartbeat,
		Pool: admin.PoolView{
			TotalPages: p.TotalPages, FreePages: p.FreePages, ReservedPages: p.ReservedPages, InUsePages: p.InUsePages,
			QuarantinedPages: p.QuarantinedPages, PageTokens: int64(p.PageTokens), CapacityTokens: p.CapacityTokens,
			OwnerViolations: p.OwnerViolations, CachedPages: p.CachedPages,
		},
		Running: int(w.Running), Waiting: int(w.Waiting), InFlightBudget: w.InFlightBudget,
		Cordoned: w.Cordoned, Draining: w.Draining, Assigned: w.Assigned, Idle: w.Idle(),
		Adapters: adapterMemoryView(w.Adapters),
	}
}

// adapterMemoryView is a worker's adapter memory for the admin API; nil
// when it reports none.
func adapterMemoryView(m registry.AdapterMemory) *adminclient.AdapterMemoryView {
	if !m.Reported {
		return nil
	}
	return &adminclient.AdapterMemoryView{CapacityBytes: m.Capacity, UsedBytes: m.Used,
		Loaded: slices.Clone(m.Loaded), Pinned: slices.Clone(m.Pinned)}
}

// Cordon implements admin.Cluster.
func (c clusterView) Cordon(id string, on bool) (admin.WorkerView, bool) {
	s, ok := c.g.reg.Cordon(id, on)
	if !ok {
		return admin.WorkerView{}, false
	}
	return workerView(s), true
}

// Models implements admin.Cluster.
func (c clusterView) Models() []admin.ModelView {
	states := c.g.admission.States()
	snaps := map[string]registry.Snapshot{}
	for _, w := range c.g.reg.Workers() {
		snaps[w.ID] = w
	}
	out := make([]admin.ModelView, len(states))
	for i, s := range states {
		ws := make([]admin.WorkerCapacity, len(s.Workers))
		for j, w := range s.Workers {
			snap := snaps[w.ID]
			ws[j] = admin.WorkerCapacity{ID: w.ID, Role: w.Role, CapacityTokens: w.CapacityTokens,
				UsableTokens: w.CapacityTokens - w.UnusableTokens, WeightsDType: snap.WeightsDType, Memory: memoryPlan(snap.Memory),
				Adapters: adapterMemoryView(snap.Adapters)}
		}
		out[i] = admin.ModelView{
			Name: s.Model, ConfiguredContext: s.Configured, EffectiveContext: s.Effective,
			Policy: string(s.Policy), Serving: s.Serving, Verdict: string(s.Verdict),
			Workers: ws, MaxOutputTokens: s.MaxOutputTokens,
			Reason: s.Reason, Degraded: s.Degraded, UsableContext: s.Usable, Refused: c.g.layouts.refusals(s.Model),
		}
	}
	return out
}

// memoryPlan is a worker's MemoryPlan for the admin API; nil stays nil.
func memoryPlan(p *controlpb.MemoryPlan) *admin.MemoryPlan {
	if p == nil {
		return nil
	}
	return &admin.MemoryPlan{Source: p.GetSource(), LimitBytes: p.GetLimitBytes(), AvailableBytes: p.GetAvailableBytes(),
		HeadroomBytes: p.GetHeadroomBytes(), WeightsBytes: p.GetWeightsBytes(), BudgetBytes: p.GetBudgetBytes()}
}

// requestsView adapts the lifecycle table to the admin API.
type requestsView struct{ t *lifecycle.Table }

var _ admin.Requests = requestsView{}

// List implements admin.Requests: the requests in flight.
func (r requestsView) List() []admin.RequestView {
	var out []admin.RequestView
	for _, s := range r.t.List() {
		if !s.State.Terminal() {
			out = append(out, requestView(s))
		}
	}
	return out
}

// Get implements admin.Requests.
func (r requestsView) Get(id string) (admin.RequestView, bool) {
	s, ok := r.t.Get(id)
	if !ok {
		return admin.RequestView{}, false
	}
	return requestView(s), true
}

// Abort implements admin.Requests. It returns once the request reached its
// terminal state (or ctx ended); the abort fan-out to its workers runs on.
func (r requestsView) Abort(ctx context.Context, id, cause string) error {
	req, ok := r.t.Find(id)
	err := r.t.Abort(id, cause)
	switch {
	case errors.Is(err, lifecycle.ErrNotFound):
		return admin.ErrNotFound
	case errors.Is(err, lifecycle.ErrFinished):
		return admin.ErrFinished
	case err != nil:
		return err
	}
	if ok {
		select {
		case <-req.Done():
		case <-ctx.Done():
		}
	}
	return nil
}

func requestView(s lifecycle.Snapshot) admin.RequestView {
	v := admin.RequestView{
		ID: s.ID, ClientRequestID: s.ClientRequestID, Tenant: s.Tenant, Model: s.Model, Priority: s.Priority,
		State: s.State.String(), Cause: s.Cause,
		PromptTokens: s.PromptTokens, CompletionTokens: s.CompletionTokens,
		Started: s.Received, Finished: s.Finished,
	}
	// A worker asked but not holding the request (a Reserve refused for
	// capacity: the request waits in the queue) is not named.
	for _, w := range s.Workers {
		if !w.Placed {
			continue
		}
		switch w.Role {
		case registry.RolePrefill:
			v.PrefillWorker = w.ID
		case registry.RoleDecode:
			v.DecodeWorker = w.ID
		case registry.RoleBoth:
			v.PrefillWorker, v.DecodeWorker = w.ID, w.ID
		}
	}
	return v
}
