package tenant

import (
	"context"
	"crypto/rand"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"sync"
	"time"
)

// Defaults of a FleetInFlight.
const (
	DefaultShareInterval = 250 * time.Millisecond
	// shareTTLIntervals is how many intervals a report counts: a gateway
	// that dies drops out of the fleet's counts after that many missed
	// reports.
	shareTTLIntervals = 8
)

// FleetConfig configures a FleetInFlight; zero fields take the defaults.
type FleetConfig struct {
	// Replica identifies this gateway process in the store; default the
	// host name and a random suffix, new at every start.
	Replica string
	// Interval is how often the replica reports its counts and learns the
	// fleet's: the staleness of the other replicas' counts. Default
	// DefaultShareInterval.
	Interval time.Duration
	// Logger reports when the store stops and starts answering (default
	// slog.Default()).
	Logger *slog.Logger
}

// FleetInFlight counts one gateway replica's requests in flight per tenant
// and shares the counts through the store, so that the replica's fair
// queue can charge each tenant for the service it gets at the other
// replicas, not just at its own. Its own counts are always current; the other replicas'
// are as old as the last report (Run reports every Interval). When a report
// fails the other replicas' counts are dropped: the replica schedules on its
// own counts alone (Degraded) until a report succeeds again, and logs both
// transitions. Its methods are safe for concurrent use.
type FleetInFlight struct {
	store InFlightSharer
	cfg   FleetConfig

	mu       sync.Mutex
	local    map[string]int64     // this replica's, by tenant
	here     int64                // this replica's, in all
	remote   map[string]int64     // the other replicas', as of the last report
	seen     map[string]time.Time // when a report last showed the tenant elsewhere
	degraded bool
}

var unsafeReplicaBytes = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// NewFleetInFlight returns a replica's counter sharing through store.
func NewFleetInFlight(store InFlightSharer, cfg FleetConfig) *FleetInFlight {
	if cfg.Replica == "" {
		host, _ := os.Hostname()
		host = unsafeReplicaBytes.ReplaceAllString(host, "-")
		cfg.Replica = "gw-" + host[:min(len(host), 64)] + "-" + rand.Text()[:8]
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultShareInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &FleetInFlight{store: store, cfg: cfg, local: make(map[string]int64), seen: make(map[string]time.Time)}
}

// Begin counts one request of tenantID in flight on this replica until the
// returned function is called (later calls of it do nothing).
func (f *FleetInFlight) Begin(tenantID string) (end func()) {
	f.mu.Lock()
	f.local[tenantID]++
	f.here++
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.here--
			if f.local[tenantID]--; f.local[tenantID] <= 0 {
				delete(f.local, tenantID)
			}
		})
	}
}

// Elsewhere returns tenantID's requests in flight at the other replicas,
// as of the last report, and whether a report showed it with requests
// there within a report's TTL (8 intervals): whether the other replicas
// serve it too.
func (f *FleetInFlight) Elsewhere(tenantID string) (inFlight int64, recently bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, recently = f.seen[tenantID]
	return f.remote[tenantID], recently
}

// Here returns this replica's requests in flight, of every tenant.
func (f *FleetInFlight) Here() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.here
}

// Degraded reports whether the last report failed, so that the replica
// counts its own requests in flight only.
func (f *FleetInFlight) Degraded() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.degraded
}

// Report sends this replica's counts to the store and takes the other
// replicas' from its answer; on failure it drops them (see FleetInFlight).
func (f *FleetInFlight) Report(ctx context.Context) error {
	f.mu.Lock()
	sent := maps.Clone(f.local)
	f.mu.Unlock()
	fleet, err := f.store.ShareInFlight(ctx, InFlightReport{Replica: f.cfg.Replica, InFlight: sent, TTL: f.ttl()})
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if !f.degraded {
			f.cfg.Logger.Warn("cannot share requests in flight with the other gateways: fair queuing counts this gateway's only",
				"replica", f.cfg.Replica, "err", err)
		}
		f.remote, f.degraded = nil, true
		clear(f.seen)
		return err
	}
	if f.degraded {
		f.cfg.Logger.Info("sharing requests in flight with the other gateways again", "replica", f.cfg.Replica)
	}
	now := time.Now()
	remote := make(map[string]int64, len(fleet))
	for id, n := range fleet {
		if r := n - sent[id]; r > 0 {
			remote[id] = r
			f.seen[id] = now
		}
	}
	maps.DeleteFunc(f.seen, func(_ string, at time.Time) bool { return now.Sub(at) > f.ttl() })
	f.remote, f.degraded = remote, false
	return nil
}

// Run reports every Interval until ctx ends, then withdraws the replica's
// counts (a report of none that expires soon), so that the fleet forgets
// a replica that stops cleanly at once.
func (f *FleetInFlight) Run(ctx context.Context) {
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, f.ttl()/2)
		_ = f.Report(rctx) // logged, and Degraded says so
		cancel()
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.Interval)
			defer cancel()
			_, _ = f.store.ShareInFlight(wctx, InFlightReport{Replica: f.cfg.Replica, TTL: time.Millisecond})
			return
		case <-t.C:
		}
	}
}

// ttl is how long a report counts.
func (f *FleetInFlight) ttl() time.Duration { return shareTTLIntervals * f.cfg.Interval }
