package redisstore_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// loseReply runs the next script call on the leases key and then reports
// its reply lost, as a timeout or a cut connection does after the server
// ran it.
type loseReply struct{ armed atomic.Bool }

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && strings.HasPrefix(cmd.Name(), "eval") && strings.Contains(cmd.String(), ":cc:") && h.armed.CompareAndSwap(true, false) {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

// TestAcquireLostReplyVoided: an acquire that took a concurrency slot and
// held tokens on Redis but whose reply was lost fails as unavailable, and
// once Redis answers again the slot and the tokens come back without
// waiting for the lease TTL; usage records nothing for it.
func TestAcquireLostReplyVoided(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	rdb := redistest.NewClient(t, addr)
	hook := &loseReply{}
	rdb.AddHook(hook)
	prefix := redistest.Prefix(t, addr)
	s := newStore(t, rdb, redisstore.WithPrefix(prefix), redisstore.WithLeaseTTL(time.Hour))
	if _, err := s.CreateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{MaxConcurrent: 1, TokensPerMinute: 1000}}); err != nil {
		t.Fatal(err)
	}

	hook.armed.Store(true)
	_, err := s.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m", Tokens: 600})
	wantUnavailable(t, "Acquire with its reply lost", err)
	if n := rdb.ZCard(ctx, prefix+"cc:acme").Val(); n != 1 {
		t.Fatalf("the lost acquire holds %d slots on Redis, want 1 (the script ran)", n)
	}

	// The next round trip succeeds (a denial: the slot is still taken)
	// and starts voiding the lost acquire.
	waitUntil(t, "the lost acquire's slot and tokens to come back", func() bool {
		l, err := s.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m", Tokens: 600})
		if err != nil {
			return false
		}
		l.Release(ctx, tenant.Consumed{PromptTokens: 1})
		return true
	})
	u, err := s.Usage(ctx, "acme", time.Now().Add(-24*time.Hour), time.Now().Add(24*time.Hour))
	if err != nil || len(u) != 1 || u[0].Requests != 1 {
		t.Fatalf("usage %+v, %v: want the one served request only", u, err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
