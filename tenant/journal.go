package tenant

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Defaults of a ReleaseJournal.
const (
	DefaultJournalMaxEntries = 100_000
	DefaultJournalRetryMin   = 100 * time.Millisecond
	DefaultJournalRetryMax   = time.Second
	journalAttemptTimeout    = 2 * time.Second
)

// JournalConfig configures a ReleaseJournal; zero fields take the defaults.
type JournalConfig struct {
	// MaxEntries bounds the releases kept; when full, the oldest is dropped
	// (its slot then comes back at its lease's expiry).
	MaxEntries int
	// RetryMin and RetryMax bound the exponential back-off between retries
	// while the store stays unavailable. RetryMax bounds how long after the
	// store's return its slots come back.
	RetryMin, RetryMax time.Duration
	// Logger reports dropped and failed releases (default slog.Default()).
	Logger *slog.Logger
}

// ReleaseJournal keeps the releases that failed because the store was
// unavailable and retries them, oldest first, until the store takes them, so
// that a tenant's concurrency slots come back as soon as the store does —
// not at the leases' TTL — and the usage of requests that ended during an
// outage is still recorded. It is local to one process and bounded; Run
// drives the retries.
type ReleaseJournal struct {
	cfg  JournalConfig
	wake chan struct{}

	mu      sync.Mutex
	pending []journalEntry
	dropped uint64
}

type journalEntry struct {
	lease     *Lease
	used      Consumed
	requestID string
}

// NewReleaseJournal returns an empty journal.
func NewReleaseJournal(cfg JournalConfig) *ReleaseJournal {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultJournalMaxEntries
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultJournalRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(DefaultJournalRetryMax, cfg.RetryMin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &ReleaseJournal{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Add records a release that failed with ErrUnavailable, to be retried with
// the same usage.
func (j *ReleaseJournal) Add(l *Lease, used Consumed, requestID string) {
	j.mu.Lock()
	if len(j.pending) >= j.cfg.MaxEntries {
		old := j.pending[0]
		j.pending = j.pending[1:]
		j.dropped++
		j.cfg.Logger.Warn("lease release journal full: dropping the oldest release; its slot returns at the lease's expiry",
			"request_id", old.requestID, "tenant", old.lease.Info().TenantID, "max_entries", j.cfg.MaxEntries)
	}
	j.pending = append(j.pending, journalEntry{lease: l, used: used, requestID: requestID})
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// Len returns how many releases wait for the store.
func (j *ReleaseJournal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.pending)
}

// Dropped returns how many releases were dropped because the journal was
// full.
func (j *ReleaseJournal) Dropped() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.dropped
}

// Run retries the journal's releases until ctx ends: at once after an Add,
// then with back-off from RetryMin to RetryMax while the store stays
// unavailable.
func (j *ReleaseJournal) Run(ctx context.Context) {
	backoff := j.cfg.RetryMin
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-j.wake:
		case <-timer.C:
		}
		if j.Flush(ctx) {
			backoff = j.cfg.RetryMin
		} else {
			backoff = min(2*backoff, j.cfg.RetryMax)
		}
		if j.Len() > 0 {
			timer.Reset(backoff)
		}
	}
}

// Flush retries the pending releases in order and reports whether the
// journal is empty; it stops at the first that finds the store unavailable.
func (j *ReleaseJournal) Flush(ctx context.Context) bool {
	for ctx.Err() == nil {
		j.mu.Lock()
		if len(j.pending) == 0 {
			j.mu.Unlock()
			return true
		}
		e := j.pending[0]
		j.mu.Unlock()
		actx, cancel := context.WithTimeout(ctx, journalAttemptTimeout)
		err := e.lease.Release(actx, e.used)
		cancel()
		if errors.Is(err, ErrUnavailable) || (err != nil && ctx.Err() != nil) {
			return false
		}
		if err != nil && !errors.Is(err, ErrLeaseReleased) {
			j.cfg.Logger.Warn("releasing tenant lease from the journal", "request_id", e.requestID, "err", err)
		}
		j.mu.Lock()
		if len(j.pending) > 0 && j.pending[0].lease == e.lease {
			j.pending[0] = journalEntry{}
			j.pending = j.pending[1:]
		}
		j.mu.Unlock()
	}
	return false
}
