// Package registry is the gateway's view of its workers: the gRPC Registry
// service workers register and heartbeat with, the worker table (identity,
// pool accounting, load, health), one client connection per worker, and
// routing (least-loaded healthy worker for a model and role).
//
// # Health
//
// A worker is healthy from its Register until HeartbeatTimeout passes
// without a heartbeat; it is then marked down (Change Lost), and its later
// heartbeats are answered with reregister, so it comes back only through
// Register (which vets it again). A worker down for ForgetAfter is removed
// and its connection closed.
//
// # Changes
//
// Config.OnChange hears, one call at a time and in order, every change that
// can alter what the gateway may serve or how much: a registration, a loss,
// a change of pool capacity, and a heartbeat showing more free pages than
// the previous one. Each call may read the registry; since calls are
// serialised and each sees the latest table, the last call always sees the
// final state.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/internal/controlpb"
)

// Roles as strings (also used in metrics and the admin API).
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
	RoleBoth    = "both"
)

// ErrNoWorker: no healthy worker can take the request.
var ErrNoWorker = errors.New("registry: no healthy worker")

// RoleName returns the string form of a proto role ("" when unspecified).
func RoleName(r controlpb.Role) string {
	switch r {
	case controlpb.Role_ROLE_PREFILL:
		return RolePrefill
	case controlpb.Role_ROLE_DECODE:
		return RoleDecode
	case controlpb.Role_ROLE_BOTH:
		return RoleBoth
	}
	return ""
}

// ChangeKind says what changed.
type ChangeKind uint8

// Change kinds.
const (
	// Registered: a worker registered (new, restarted or back after a loss).
	Registered ChangeKind = iota + 1
	// Lost: a worker missed its heartbeat deadline and is down.
	Lost
	// Capacity: a worker's pool capacity changed.
	Capacity
	// Freed: a worker's free pages grew.
	Freed
)

func (k ChangeKind) String() string {
	switch k {
	case Registered:
		return "registered"
	case Lost:
		return "lost"
	case Capacity:
		return "capacity"
	case Freed:
		return "freed"
	}
	return fmt.Sprintf("change(%d)", uint8(k))
}

// Change is one event of the change feed.
type Change struct {
	Kind   ChangeKind
	Worker Snapshot
}

// Defaults for zero Config fields.
const (
	DefaultHeartbeatTimeout = 6 * time.Second
	// MinForgetAfter is the shortest time a lost worker stays listed.
	MinForgetAfter = 5 * time.Minute
)

// Config configures a Registry.
type Config struct {
	// GatewayID is returned to registering workers.
	GatewayID string
	// HeartbeatTimeout: a worker silent for longer is lost. Workers are
	// told to heartbeat at a third of it.
	HeartbeatTimeout time.Duration
	// ForgetAfter: a worker lost for longer is removed; default
	// max(10 × HeartbeatTimeout, MinForgetAfter).
	ForgetAfter time.Duration
	// Dial opens the connection to a worker's control address (with the
	// gateway's cluster credentials). grpc.NewClient-style: it must not
	// block.
	Dial func(addr string) (*grpc.ClientConn, error)
	// Accept, if set, vets a registering worker before it is listed (model
	// configured, tokenizer). Its error is returned to the worker: use a
	// gRPC status; anything else is sent as FailedPrecondition.
	Accept func(ctx context.Context, info *controlpb.WorkerInfo, client controlpb.WorkerClient) error
	// OnChange, if set, receives the change feed (see the package doc).
	OnChange func(Change)
	Logger   *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Registry is the worker table and the Registry gRPC service.
type Registry struct {
	controlpb.UnimplementedRegistryServer
	cfg Config

	// registering serialises registrations, so that Accept sees every
	// worker accepted before (two workers of one model with different
	// tokenizers cannot both pass).
	registering sync.Mutex
	notify      sync.Mutex // serialises OnChange
	mu          sync.Mutex
	byID        map[string]*Worker
}

var _ controlpb.RegistryServer = (*Registry)(nil)

// New returns an empty registry.
func New(cfg Config) *Registry {
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.ForgetAfter <= 0 {
		cfg.ForgetAfter = max(10*cfg.HeartbeatTimeout, MinForgetAfter)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Registry{cfg: cfg, byID: make(map[string]*Worker)}
}

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
	lastHeartbeat time.Time
	registeredAt  time.Time
	lostAt        time.Time
	assigned      int64  // requests this gateway routed here, not yet done
	pendingPages  int64  // pages routed here since the last heartbeat
	reports       uint64 // registrations and heartbeats received

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
func (w *Worker) Begin(pages int64) (done func()) {
	w.reg.mu.Lock()
	w.assigned++
	w.pendingPages += pages
	seen := w.reports
	w.reg.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.reg.mu.Lock()
			defer w.reg.mu.Unlock()
			w.assigned--
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
}

func poolOf(p *controlpb.PoolStats) Pool {
	return Pool{
		TotalPages: p.GetTotalPages(), FreePages: p.GetFreePages(), ReservedPages: p.GetReservedPages(),
		InUsePages: p.GetInUsePages(), QuarantinedPages: p.GetQuarantinedPages(), PageTokens: p.GetPageTokens(),
		CapacityTokens: p.GetCapacityTokens(), OwnerViolations: p.GetOwnerViolations(),
	}
}

// Snapshot is a copy of one worker's state.
type Snapshot struct {
	ID, Role, Model                            string
	ControlAddr, TransferAddr, TransferBackend string
	HostID, TokenizerSHA256, Backend, Version  string
	ModelMaxContext                            int64
	Pool                                       Pool
	Running, Waiting                           int32
	Healthy                                    bool
	LastHeartbeat, RegisteredAt                time.Time
	Assigned                                   int64
}

func (w *Worker) snapshotLocked() Snapshot {
	i := w.info
	return Snapshot{
		ID: w.id, Role: RoleName(i.GetRole()), Model: i.GetModel(),
		ControlAddr: i.GetControlAddr(), TransferAddr: i.GetTransferAddr(), TransferBackend: i.GetTransferBackend(),
		HostID: i.GetHostId(), TokenizerSHA256: i.GetTokenizerSha256(), Backend: i.GetBackend(), Version: i.GetVersion(),
		ModelMaxContext: i.GetModelMaxContext(),
		Pool:            poolOf(w.pool), Running: w.running, Waiting: w.waiting,
		Healthy: w.healthy, LastHeartbeat: w.lastHeartbeat, RegisteredAt: w.registeredAt, Assigned: w.assigned,
	}
}

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

	// Reuse the connection of a healthy worker whose address is unchanged
	// (it re-registers because it was told to); dial afresh otherwise. A
	// lost worker's connection is in reconnect backoff, and its first RPCs
	// would fail fast although the worker is back.
	r.mu.Lock()
	old := r.byID[info.WorkerId]
	var conn *grpc.ClientConn
	if old != nil && old.healthy && old.info.GetControlAddr() == info.ControlAddr {
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
	w.running, w.waiting = 0, 0
	w.healthy, w.lastHeartbeat, w.registeredAt, w.lostAt = true, now, now, time.Time{}
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
	w.pool, w.running, w.waiting = req.Pool, req.Running, req.Waiting
	w.lastHeartbeat = r.cfg.Now()
	w.pendingPages = 0
	w.reports++
	snap := w.snapshotLocked()
	r.mu.Unlock()

	switch {
	case prev.GetCapacityTokens() != req.Pool.CapacityTokens:
		r.cfg.Logger.Warn("worker pool capacity changed", "worker", snap.ID, "model", snap.Model,
			"from", prev.GetCapacityTokens(), "to", req.Pool.CapacityTokens)
		r.emit(Change{Kind: Capacity, Worker: snap})
	case req.Pool.FreePages > prev.GetFreePages()-pending:
		// More free pages than routing assumed: waiters may fit now.
		r.emit(Change{Kind: Freed, Worker: snap})
	}
	return &controlpb.HeartbeatResponse{}, nil
}

func (r *Registry) emit(c Change) {
	if r.cfg.OnChange == nil {
		return
	}
	r.notify.Lock()
	defer r.notify.Unlock()
	r.cfg.OnChange(c)
}

// Run marks workers lost when their heartbeats stop, and forgets long-lost
// ones, until ctx is done.
func (r *Registry) Run(ctx context.Context) {
	tick := time.NewTicker(max(r.cfg.HeartbeatTimeout/4, 5*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.sweep()
		}
	}
}

// sweep marks silent workers lost and removes long-lost ones.
func (r *Registry) sweep() {
	now := r.cfg.Now()
	var lost []Snapshot
	var closing []*grpc.ClientConn
	r.mu.Lock()
	for id, w := range r.byID {
		switch {
		case w.healthy && now.Sub(w.lastHeartbeat) > r.cfg.HeartbeatTimeout:
			w.healthy, w.lostAt = false, now
			lost = append(lost, w.snapshotLocked())
		case !w.healthy && now.Sub(w.lostAt) > r.cfg.ForgetAfter:
			delete(r.byID, id)
			closing = append(closing, w.conn)
		}
	}
	r.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
	for _, s := range lost {
		r.cfg.Logger.Warn("worker lost: no heartbeat", "worker", s.ID, "role", s.Role, "model", s.Model,
			"last_heartbeat", s.LastHeartbeat, "timeout", r.cfg.HeartbeatTimeout)
		r.emit(Change{Kind: Lost, Worker: s})
	}
}

// Get returns the worker with id, healthy or not.
func (r *Registry) Get(id string) (*Worker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.byID[id]
	return w, ok
}

// Workers returns every listed worker's snapshot, by ID.
func (r *Registry) Workers() []Snapshot {
	r.mu.Lock()
	out := make([]Snapshot, 0, len(r.byID))
	for _, w := range r.byID {
		out = append(out, w.snapshotLocked())
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Healthy returns the snapshots of model's healthy workers, by ID.
func (r *Registry) Healthy(model string) []Snapshot {
	var out []Snapshot
	for _, s := range r.Workers() {
		if s.Healthy && s.Model == model {
			out = append(out, s)
		}
	}
	return out
}

// Route is a routing decision: a worker that holds the KV and decodes
// (decode or both), and for a decode worker the prefill worker.
type Route struct {
	Decode  *Worker
	Prefill *Worker // nil when Decode has role both
	// Pages is how many pages the request needs on Decode.
	Pages int64
	// FreePages is Decode's free pages as last reported, less the pages
	// routed there since.
	FreePages int64
}

// Pick chooses where a request of totalTokens (prompt + max output) for
// model runs: the healthy decode-capable worker (decode or both) with the
// most free pages (counting pages routed since its last heartbeat), and
// for a decode worker the healthy prefill worker with the least work. A
// decode worker is eligible only with a prefill worker it can receive
// from: its transfer backend shm needs a prefill worker on the same host
// (host_id); tcp takes any. Ties go to fewer requests routed by this
// gateway, then to the smaller ID. Free pages only rank workers: whether
// they are really free is for the worker's Reserve to say.
func (r *Registry) Pick(model string, totalTokens int64) (Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best, bestPrefill *Worker
	for _, w := range r.byID {
		if !w.healthy || w.info.Model != model {
			continue
		}
		var prefill *Worker
		switch w.info.Role {
		case controlpb.Role_ROLE_BOTH:
		case controlpb.Role_ROLE_DECODE:
			if prefill = r.prefillFor(w); prefill == nil {
				continue
			}
		default:
			continue
		}
		if best == nil || decodeLess(w, best) {
			best, bestPrefill = w, prefill
		}
	}
	if best == nil {
		return Route{}, fmt.Errorf("%w for model %s", ErrNoWorker, model)
	}
	return Route{Decode: best, Prefill: bestPrefill, Pages: pagesFor(totalTokens, best.pool.GetPageTokens()),
		FreePages: best.pool.GetFreePages() - best.pendingPages}, nil
}

// prefillFor returns the least-loaded healthy prefill worker that can push
// KV to decode, or nil. Called with r.mu held.
func (r *Registry) prefillFor(decode *Worker) *Worker {
	sameHost := decode.info.TransferBackend == "shm"
	var best *Worker
	for _, w := range r.byID {
		if !w.healthy || w.info.Model != decode.info.Model || w.info.Role != controlpb.Role_ROLE_PREFILL ||
			(sameHost && w.info.HostId != decode.info.HostId) {
			continue
		}
		if best == nil || prefillLess(w, best) {
			best = w
		}
	}
	return best
}

func pagesFor(tokens int64, pageTokens int32) int64 {
	if pageTokens <= 0 {
		return 0
	}
	return (tokens + int64(pageTokens) - 1) / int64(pageTokens)
}

func decodeLess(a, b *Worker) bool {
	fa, fb := a.pool.GetFreePages()-a.pendingPages, b.pool.GetFreePages()-b.pendingPages
	if fa != fb {
		return fa > fb
	}
	if a.assigned != b.assigned {
		return a.assigned < b.assigned
	}
	return a.id < b.id
}

func prefillLess(a, b *Worker) bool {
	la := int64(a.running) + int64(a.waiting) + a.assigned
	lb := int64(b.running) + int64(b.waiting) + b.assigned
	if la != lb {
		return la < lb
	}
	return a.id < b.id
}

// Close closes every worker connection.
func (r *Registry) Close() {
	r.mu.Lock()
	conns := make([]*grpc.ClientConn, 0, len(r.byID))
	for _, w := range r.byID {
		conns = append(conns, w.conn)
	}
	r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
