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
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/warden-ai/warden/internal/constrain"
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
	// Suspected: a worker's connection was refused or reset; it is down
	// like a lost one, but its calls fail by themselves (the connection
	// is gone), so nothing needs aborting on its account.
	Suspected
)

// String names the change for logs.
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
	case Suspected:
		return "suspected"
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
	// Agree, if set, checks a registering worker against the model's
	// other workers (layout agreement, I11) before Accept. Its error is
	// returned to the worker as FailedPrecondition.
	Agree func(info *controlpb.WorkerInfo, pool *controlpb.PoolStats) error
	// OnChange, if set, receives the change feed (see the package doc).
	OnChange func(Change)
	// PrefixCache, if set, receives the prefix-cache report of every
	// accepted registration (after its Registered change) and heartbeat
	// of a known worker, for the routing index.
	PrefixCache func(worker, model string, report *controlpb.PrefixCacheReport)
	Logger      *slog.Logger
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

// ConstraintLimits returns the smallest structured-output limits among
// model's healthy workers (a worker that advertises none counts with the
// defaults; the defaults when none is healthy): a constraint within them
// is accepted by whichever worker serves the request (prefill, decode).
func (r *Registry) ConstraintLimits(model string) constrain.Limits {
	lim := constrain.DefaultLimits
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.byID {
		if w.healthy && w.info.GetModel() == model {
			lim = lim.Min(w.info.GetConstraintLimits().Limits())
		}
	}
	return lim
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
