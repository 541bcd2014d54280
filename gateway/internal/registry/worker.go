package registry

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/internal/controlpb"
)

// Worker is one registered worker. The same *Worker stands for a worker ID
// across re-registrations; its connection is replaced when the control
// address changes or the worker had been lost.
type Worker struct {
	id string

	// guarded by Registry.mu
	conn          *grpc.ClientConn
	client        controlpb.WorkerClient
	info          *controlpb.WorkerInfo
	pool          *controlpb.PoolStats
	running       int32
	waiting       int32
	healthy       bool
	cordoned      bool // an operator stopped new placements here (Cordon)
	draining      bool // the worker itself is shutting down (its SIGTERM)
	lastHeartbeat time.Time
	registeredAt  time.Time
	lostAt        time.Time
	assigned      int64                    // requests this gateway routed here, not yet done
	byTenant      map[string]int64         // assigned, per tenant (BeginFor)
	pendingPages  int64                    // pages routed here since the last heartbeat
	reports       uint64                   // registrations and heartbeats received
	slots         int32                    // learned batch size, 0 until seen (budget.go)
	adapters      *controlpb.AdapterMemory // LoRA adapter memory of the last heartbeat

	reg *Registry
}

// ID returns the worker ID.
func (w *Worker) ID() string { return w.id }

// Client returns the worker's control client (its current connection).
func (w *Worker) Client() controlpb.WorkerClient {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	return w.client
}

// Snapshot returns a copy of the worker's state.
func (w *Worker) Snapshot() Snapshot {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	return w.snapshotLocked()
}

// Begin records that the gateway routed a request needing pages (0 for a
// prefill worker) here; call the returned func when it is done. Routing
// uses these counts between heartbeats: the pages are counted as taken
// until the next heartbeat, and as free again once the request is done
// (the worker frees them before it ends the request).
func (w *Worker) Begin(pages int64) (done func()) { return w.BeginFor("", pages) }

// BeginFor is Begin for a request of tenant, which it also counts per
// tenant (Newcomer); "" counts it for no tenant.
func (w *Worker) BeginFor(tenant string, pages int64) (done func()) {
	w.reg.mu.Lock()
	w.assigned++
	if tenant != "" {
		if w.byTenant == nil {
			w.byTenant = make(map[string]int64)
		}
		w.byTenant[tenant]++
	}
	w.pendingPages += pages
	seen := w.reports
	w.reg.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.reg.mu.Lock()
			defer w.reg.mu.Unlock()
			w.assigned--
			if tenant != "" {
				if w.byTenant[tenant]--; w.byTenant[tenant] <= 0 {
					delete(w.byTenant, tenant)
				}
			}
			if w.reports == seen {
				w.pendingPages -= pages
			} else if free := min(w.pool.GetFreePages()+pages, w.pool.GetTotalPages()); free > w.pool.GetFreePages() {
				// A heartbeat counted them in use since.
				p := proto.Clone(w.pool).(*controlpb.PoolStats)
				p.FreePages = free
				w.pool = p
			}
		})
	}
}

// Exhausted records that the worker just refused pages for lack of free
// ones: its free count is taken to be below pages until the next heartbeat,
// so that a heartbeat showing enough free pages is reported (Freed) even if
// the previous one was already stale.
func (w *Worker) Exhausted(pages int64) {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	if w.pool.GetFreePages() >= pages {
		p := proto.Clone(w.pool).(*controlpb.PoolStats)
		p.FreePages = max(pages-1, 0)
		w.pool = p
	}
}

// Pool is a worker's KV pool accounting as last reported.
type Pool struct {
	TotalPages, FreePages, ReservedPages, InUsePages, QuarantinedPages int64
	PageTokens                                                         int32
	CapacityTokens, OwnerViolations                                    int64
	// CachedPages is the part of FreePages that is cached prefix pages.
	CachedPages int64
}

// UsableTokens is the most tokens one request can hold on this worker
// now: every page except the quarantined ones, times page_tokens. Free,
// reserved and in-use pages (and reclaimable cached ones) all come back
// without a restart; quarantined pages do not until their writer is
// proven drained or the worker restarts (I5). This is the one place the
// gateway derives a pool's capacity net of quarantine (I12): admission,
// routing and the admin API use it.
func (p Pool) UsableTokens() int64 {
	return max(p.TotalPages-p.QuarantinedPages, 0) * int64(p.PageTokens)
}

func poolOf(p *controlpb.PoolStats) Pool {
	return Pool{
		TotalPages: p.GetTotalPages(), FreePages: p.GetFreePages(), ReservedPages: p.GetReservedPages(),
		InUsePages: p.GetInUsePages(), QuarantinedPages: p.GetQuarantinedPages(), PageTokens: p.GetPageTokens(),
		CapacityTokens: p.GetCapacityTokens(), OwnerViolations: p.GetOwnerViolations(), CachedPages: p.GetCachedPages(),
	}
}

// Snapshot is a copy of one worker's state.
type Snapshot struct {
	ID, Role, Model                            string
	ControlAddr, TransferAddr, TransferBackend string
	HostID, TokenizerSHA256, Backend, Version  string
	KVDType, KVLayout, WeightsSHA256           string
	// WeightsDType is the element type the worker computes with ("f32",
	// "f16", "bf16", "q8"); "" from a worker that does not say.
	WeightsDType string
	// Memory is how the worker sized its KV pool; nil from a worker that
	// does not say. Read-only.
	Memory           *controlpb.MemoryPlan
	ModelMaxContext  int64
	Pool             Pool
	Running, Waiting int32
	Healthy          bool
	// Cordoned: no new request is placed here (Registry.Cordon).
	Cordoned bool
	// Draining: the worker is shutting down and said so; no new request
	// is placed here, those in flight run to their end.
	Draining                    bool
	LastHeartbeat, RegisteredAt time.Time
	Assigned                    int64

	// Adapters is its LoRA adapter memory.
	Adapters AdapterMemory
	// Slots is the learned batch size, 0 until the worker was seen
	// saturated; InFlightBudget the most requests this gateway places
	// there at once (0: no bound). See budget.go.
	Slots          int32
	InFlightBudget int64
}

// Idle reports whether no request of this gateway runs on the worker and
// its last heartbeat showed none running or waiting: a drained worker
// may be stopped.
func (s Snapshot) Idle() bool {
	return s.Assigned == 0 && s.Running == 0 && s.Waiting == 0
}

func (w *Worker) snapshotLocked() Snapshot {
	i := w.info
	return Snapshot{
		ID: w.id, Role: RoleName(i.GetRole()), Model: i.GetModel(),
		ControlAddr: i.GetControlAddr(), TransferAddr: i.GetTransferAddr(), TransferBackend: i.GetTransferBackend(),
		HostID: i.GetHostId(), TokenizerSHA256: i.GetTokenizerSha256(), Backend: i.GetBackend(), Version: i.GetVersion(),
		KVDType: i.GetKvDtype(), KVLayout: i.GetKvLayout(), WeightsSHA256: i.GetWeightsSha256(),
		WeightsDType: i.GetWeightsDtype(), Memory: i.GetMemory(),
		ModelMaxContext: i.GetModelMaxContext(),
		Pool:            poolOf(w.pool), Running: w.running, Waiting: w.waiting,
		Slots: w.slots, InFlightBudget: w.budgetLocked(), Adapters: adapterMemoryOf(w.adapters),
		Healthy: w.healthy, Cordoned: w.cordoned, Draining: w.draining, LastHeartbeat: w.lastHeartbeat, RegisteredAt: w.registeredAt, Assigned: w.assigned,
	}
}
