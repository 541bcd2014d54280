package worker

import (
	"net"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/runtime"
)

// controlAddr is the address gateways dial: worker.advertise_addr, or the
// address the control listener is bound to.
func (w *Worker) controlAddr() string {
	if a := w.cfg.Worker.AdvertiseAddr; a != "" {
		return a
	}
	return w.controlLn.Addr().String()
}

// advertisedTransferAddr is the address prefill workers dial:
// worker.transfer.advertise_addr, or the host of the control address with
// the port the transfer listener is bound to.
func (w *Worker) advertisedTransferAddr() string {
	if a := w.cfg.Worker.Transfer.AdvertiseAddr; a != "" {
		return a
	}
	host, _, err := net.SplitHostPort(w.controlAddr())
	if err != nil {
		host = ""
	}
	_, port, _ := net.SplitHostPort(w.transferLn.Addr().String())
	return net.JoinHostPort(host, port)
}

var rolesPB = map[config.Role]controlpb.Role{
	config.RolePrefill: controlpb.Role_ROLE_PREFILL,
	config.RoleDecode:  controlpb.Role_ROLE_DECODE,
	config.RoleBoth:    controlpb.Role_ROLE_BOTH,
}

func (w *Worker) workerInfo(hostname, version string) *controlpb.WorkerInfo {
	wc := &w.cfg.Worker
	return &controlpb.WorkerInfo{
		WorkerId:        w.id,
		Role:            rolesPB[w.role],
		Model:           wc.Model,
		ControlAddr:     w.controlAddr(),
		TransferAddr:    w.transferAddr,
		TransferBackend: string(wc.Transfer.Backend),
		HostId:          hostID(hostname),
		TokenizerSha256: w.assets.TokenizerSha256,
		ModelMaxContext: int64(w.rt.Model.Config.ContextLength()),
		Backend:         string(wc.Backend),
		Version:         version,
		KvDtype:         w.layout.kvDType,
		KvLayout:        w.layout.kvLayout,
		WeightsSha256:   w.layout.weightsSHA256,

		PrefixCacheVersion: w.reportedCacheVersion(),
		ConstraintLimits:   controlpb.NewConstraintLimits(constrain.DefaultLimits),
		Memory:             memoryPlan(w.rt.Memory),
		WeightsDtype:       w.rt.WeightsDType,
	}
}

// memoryPlan is the runtime's memory plan in the protocol's form.
func memoryPlan(p runtime.MemoryPlan) *controlpb.MemoryPlan {
	return &controlpb.MemoryPlan{Source: p.Source, LimitBytes: p.LimitBytes, AvailableBytes: p.AvailableBytes,
		HeadroomBytes: p.HeadroomBytes, WeightsBytes: p.WeightsBytes, BudgetBytes: p.BudgetBytes}
}

// poolStats is the pool's accounting in the protocol's form.
func (w *Worker) poolStats() *controlpb.PoolStats {
	s := w.rt.Pool.Stats()
	return &controlpb.PoolStats{
		TotalPages: int64(s.Total),
		// Cached pages are evicted on demand, so a reservation can have
		// them: free here means available now (I12).
		FreePages:        int64(s.AvailableNow()),
		ReservedPages:    int64(s.Reserved),
		InUsePages:       int64(s.InUse),
		QuarantinedPages: int64(s.Quarantined),
		PageTokens:       int32(s.PageTokens),
		CapacityTokens:   w.capacity.Tokens,
		OwnerViolations:  int64(s.Violations),
		CachedPages:      int64(s.Cached),
	}
}
