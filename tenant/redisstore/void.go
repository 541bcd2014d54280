package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// maxVoids bounds the acquires waiting to be voided; past it the oldest is
// forgotten (its slot, if it took one, comes back at the lease's TTL).
const maxVoids = 10_000

// voidLease is an acquire whose outcome is unknown: the script may have
// run (and taken a concurrency slot and held tokens) while its reply was
// lost to a timeout, a cut connection or a failover.
type voidLease struct {
	tenantID, id string
	held         int64
	acquired     time.Time
}

// voids are the acquires to void once Redis answers again, so that a lost
// reply does not hold a tenant's slot for the whole lease TTL.
type voids struct {
	mu       sync.Mutex
	pending  []voidLease
	flushing atomic.Bool
}

func (v *voids) add(l voidLease) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.pending) >= maxVoids {
		v.pending = v.pending[1:]
	}
	v.pending = append(v.pending, l)
}

func (v *voids) next() (voidLease, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.pending) == 0 {
		return voidLease{}, false
	}
	l := v.pending[0]
	v.pending = v.pending[1:]
	return l, true
}

func (v *voids) putBack(l voidLease) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pending = append([]voidLease{l}, v.pending...)
}

func (v *voids) len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.pending)
}

// mayHaveRun reports whether a failed script call may still have run on
// the server: not when the server answered with an error or the
// connection was never made.
func mayHaveRun(err error) bool {
	var re redis.Error
	var op *net.OpError
	return !errors.As(err, &re) && !(errors.As(err, &op) && op.Op == "dial")
}

// minHeld is the least an acquire of req can hold (a flexible request
// holds between MinTokens and Tokens): what voiding it refunds.
func minHeld(req tenant.AcquireRequest) int64 {
	if req.MinTokens > 0 && req.MinTokens < req.Tokens {
		return req.MinTokens
	}
	return req.Tokens
}

// flushVoids voids the pending acquires in the background, one at a time,
// until none is left or Redis fails again; a successful round trip starts
// it (ok).
func (s *Store) flushVoids() {
	if s.voids.len() == 0 || !s.voids.flushing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.voids.flushing.Store(false)
		for {
			l, ok := s.voids.next()
			if !ok {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := s.runRelease(ctx, tenant.LeaseInfo{ID: l.id, TenantID: l.tenantID, HeldTokens: l.held, AcquiredAt: l.acquired}, tenant.Consumed{}, "1")
			cancel()
			if err != nil {
				s.voids.putBack(l)
				s.log.Warn("cannot void an acquire whose reply was lost; retrying when Redis answers", "tenant", l.tenantID, "err", err)
				return
			}
		}
	}()
}
