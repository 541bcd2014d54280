package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
)

// validatePool checks the accounting a worker reports.
func validatePool(p *controlpb.PoolStats) error {
	switch {
	case p == nil:
		return errors.New("pool stats missing")
	case p.TotalPages <= 0 || p.PageTokens <= 0:
		return fmt.Errorf("pool: total_pages %d and page_tokens %d must be > 0", p.TotalPages, p.PageTokens)
	case p.FreePages < 0 || p.ReservedPages < 0 || p.InUsePages < 0 || p.QuarantinedPages < 0:
		return errors.New("pool: negative page count")
	case p.FreePages+p.ReservedPages+p.InUsePages+p.QuarantinedPages > p.TotalPages:
		return fmt.Errorf("pool: free+reserved+in_use+quarantined exceeds total_pages %d", p.TotalPages)
	case p.CapacityTokens != p.TotalPages*int64(p.PageTokens):
		return fmt.Errorf("pool: capacity_tokens %d != total_pages %d × page_tokens %d", p.CapacityTokens, p.TotalPages, p.PageTokens)
	}
	return nil
}

func validateInfo(i *controlpb.WorkerInfo) error {
	switch {
	case i == nil:
		return errors.New("worker info missing")
	case i.WorkerId == "" || len(i.WorkerId) > 128:
		return fmt.Errorf("worker_id must be 1-128 bytes (got %d)", len(i.WorkerId))
	case RoleName(i.Role) == "":
		return errors.New("role unspecified")
	case i.Model == "":
		return errors.New("model missing")
	case i.TokenizerSha256 == "":
		return errors.New("tokenizer_sha256 missing")
	}
	if _, _, err := net.SplitHostPort(i.ControlAddr); err != nil {
		return fmt.Errorf("control_addr %q: %v", i.ControlAddr, err)
	}
	if i.Role == controlpb.Role_ROLE_DECODE {
		if _, _, err := net.SplitHostPort(i.TransferAddr); err != nil {
			return fmt.Errorf("transfer_addr %q: %v", i.TransferAddr, err)
		}
	}
	return nil
}

// Register implements controlpb.RegistryServer.
func (r *Registry) Register(ctx context.Context, req *controlpb.RegisterRequest) (*controlpb.RegisterResponse, error) {
	info := req.GetWorker()
	if err := validateInfo(info); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register: %v", err)
	}
	if err := validatePool(req.GetPool()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register %s: %v", info.WorkerId, err)
	}

	r.registering.Lock()
	defer r.registering.Unlock()
	if r.cfg.Agree != nil {
		if err := r.cfg.Agree(info, req.GetPool()); err != nil {
			r.cfg.Logger.Warn("worker registration refused", "worker", info.WorkerId, "model", info.Model, "err", err)
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
	}

	// Reuse the connection of a healthy worker whose address is unchanged
	// and whose connection is up (it re-registers because it was told
	// to); dial afresh otherwise. A lost or restarted worker's old
	// connection is in reconnect backoff, and its first RPCs would fail
	// fast although the worker is back: a re-registered worker must serve
	// from the moment it registers.
	r.mu.Lock()
	old := r.byID[info.WorkerId]
	var conn *grpc.ClientConn
	if old != nil && old.healthy && old.info.GetControlAddr() == info.ControlAddr && reusable(old.conn.GetState()) {
		conn = old.conn
	}
	r.mu.Unlock()
	fresh := conn == nil
	if fresh {
		var err error
		if conn, err = r.cfg.Dial(info.ControlAddr); err != nil {
			return nil, status.Errorf(codes.Unavailable, "register %s: dial %s: %v", info.WorkerId, info.ControlAddr, err)
		}
	}
	client := controlpb.NewWorkerClient(conn)
	if r.cfg.Accept != nil {
		if err := r.cfg.Accept(ctx, info, client); err != nil {
			if fresh {
				_ = conn.Close()
			}
			if _, ok := status.FromError(err); !ok {
				err = status.Error(codes.FailedPrecondition, err.Error())
			}
			r.cfg.Logger.Warn("worker registration refused", "worker", info.WorkerId, "model", info.Model, "err", err)
			return nil, err
		}
	}

	now := r.cfg.Now()
	r.mu.Lock()
	w := r.byID[info.WorkerId]
	if w == nil {
		w = &Worker{id: info.WorkerId, reg: r}
		r.byID[w.id] = w
	}
	var stale *grpc.ClientConn
	if w.conn != conn {
		stale = w.conn
	}
	w.conn, w.client = conn, client
	w.info, w.pool = info, req.Pool
	w.running, w.waiting, w.slots = 0, 0, 0
	w.adapters = nil // a registering worker holds no adapter; its heartbeats say what it has
	w.healthy, w.lastHeartbeat, w.registeredAt, w.lostAt = true, now, now, time.Time{}
	w.draining = req.Draining
	w.pendingPages = 0
	w.reports++
	snap := w.snapshotLocked()
	r.mu.Unlock()
	if stale != nil {
		_ = stale.Close()
	}
	r.cfg.Logger.Info("worker registered", "worker", snap.ID, "role", snap.Role, "model", snap.Model,
		"control_addr", snap.ControlAddr, "capacity_tokens", snap.Pool.CapacityTokens, "free_pages", snap.Pool.FreePages)
	r.emit(Change{Kind: Registered, Worker: snap})
	r.prefixCache(snap, req.GetPrefixCache())
	return &controlpb.RegisterResponse{
		HeartbeatIntervalMs: max(r.cfg.HeartbeatTimeout/3, time.Millisecond).Milliseconds(),
		GatewayId:           r.cfg.GatewayID,
	}, nil
}

// Heartbeat implements controlpb.RegistryServer. Unknown or lost workers
// are told to register again.
func (r *Registry) Heartbeat(_ context.Context, req *controlpb.HeartbeatRequest) (*controlpb.HeartbeatResponse, error) {
	if err := validatePool(req.GetPool()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "heartbeat %s: %v", req.GetWorkerId(), err)
	}
	r.mu.Lock()
	w := r.byID[req.WorkerId]
	if w == nil || !w.healthy {
		r.mu.Unlock()
		return &controlpb.HeartbeatResponse{Reregister: true}, nil
	}
	prev, pending := w.pool, w.pendingPages
	startsDraining := req.Draining && !w.draining
	w.draining = req.Draining
	w.pool, w.running, w.waiting = req.Pool, req.Running, req.Waiting
	w.adapters = req.GetAdapters()
	w.learnSlots()
	w.lastHeartbeat = r.cfg.Now()
	w.pendingPages = 0
	w.reports++
	snap := w.snapshotLocked()
	r.mu.Unlock()
	r.prefixCache(snap, req.GetPrefixCache())

	if startsDraining {
		r.cfg.Logger.Info("worker draining: no new placements, its requests run to their end", "worker", snap.ID,
			"role", snap.Role, "model", snap.Model, "running", snap.Running, "waiting", snap.Waiting, "assigned", snap.Assigned)
	}
	switch {
	case prev.GetCapacityTokens() != req.Pool.CapacityTokens:
		r.cfg.Logger.Warn("worker pool capacity changed", "worker", snap.ID, "model", snap.Model,
			"from", prev.GetCapacityTokens(), "to", req.Pool.CapacityTokens)
		r.emit(Change{Kind: Capacity, Worker: snap})
	case prev.GetQuarantinedPages() != req.Pool.QuarantinedPages:
		// What the pool can hold now changed (I12).
		r.cfg.Logger.Warn("worker quarantined pages changed", "worker", snap.ID, "model", snap.Model,
			"from", prev.GetQuarantinedPages(), "to", req.Pool.QuarantinedPages, "usable_tokens", snap.Pool.UsableTokens())
		r.emit(Change{Kind: Capacity, Worker: snap})
	case req.Pool.FreePages > prev.GetFreePages()-pending:
		// More free pages than routing assumed: waiters may fit now.
		r.emit(Change{Kind: Freed, Worker: snap})
	}
	return &controlpb.HeartbeatResponse{}, nil
}

// prefixCache passes a worker's prefix-cache report on (Config.PrefixCache).
func (r *Registry) prefixCache(w Snapshot, report *controlpb.PrefixCacheReport) {
	if r.cfg.PrefixCache != nil && report != nil {
		r.cfg.PrefixCache(w.ID, w.Model, report)
	}
}

// reusable reports whether a worker's connection in state s may serve its
// new registration: up, or idle (it connects on the next call). One that
// is connecting or failing is in reconnect backoff.
func reusable(s connectivity.State) bool {
	return s == connectivity.Ready || s == connectivity.Idle
}
